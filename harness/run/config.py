"""Run-config schema and validation (docs/contracts.md §5).

A run config is pure-data YAML with the sections ``backend, seed, name, method, model, task, train, eval,
logging`` (+ ``openrlhf``, that backend's section). ``load_config`` applies ``key.path=value`` overrides, checks
every key and value before any work, and returns a typed ``RunConfig``. The core sections live here; the
chosen backend validates and types what it owns (``harness.backends.<name>.options``: pocket owns
``model.warm_start`` and the pocket sizes/tasks, openrlhf its ``openrlhf:`` section) at the same moment.
Errors name the key path, the bad value and what is allowed; unknown keys, tasks and model sizes get a
did-you-mean (``harness.errors``).

    cfg = load_config("sweeps/one_run.yaml", overrides=["train.steps=5", "method.name=kl_cov"])
    cfg.train.steps, cfg.to_dict(), cfg.run_id()
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from harness.errors import ConfigError, suggestion  # noqa: F401  (ConfigError re-exported for callers)
from harness.kernel.fields import build as _build
from harness.kernel.fields import opt as _opt


# ---------------------------------------------------------------------------------------------- sections
@dataclass
class ModelConfig:
    name: str = _opt(
        "pocket-0.3m",
        kind=str,
        help="pocket size (pocket-0.1m, pocket-0.3m, pocket-1m, pocket-4m), HF id or local HF dir",
    )
    warm_start: Any = _opt({}, kind=dict, help="pocket warm start (harness.backends.pocket.options.WarmStartOptions)")
    dtype: str = _opt("float32", kind=str, choices=("float32", "bfloat16", "float16"))
    cache_dir: str | None = _opt(
        None, kind="str?", measures=False, help="warm-start cache (default: $HARNESS_CACHE or ~/.cache/entropy-harness)"
    )


@dataclass
class TaskConfig:
    name: str = _opt(
        "arith", kind=str, help="pocket task (arith, countdown, gsm_arith) or a JSONL file of {prompt, answer}"
    )
    test_size: int = _opt(200, kind=int, min=1, help="held-out problems for evaluation")
    options: dict = _opt({}, kind=dict, help="task-specific options (see the task's docstring)")
    chat_template: str = _opt(
        "auto",
        kind=str,
        choices=("auto", "none"),
        late=True,
        help="pretrained models: render prompts with the tokenizer's chat template when it has one",
    )
    stop: Any = _opt(
        [], late=True, help="pretrained models: extra stop strings (single tokens) besides EOS and the end of turn"
    )


@dataclass
class TrainConfig:
    steps: int = _opt(50, kind=int, min=1)
    prompts_per_step: int = _opt(16, kind=int, min=1)
    samples_per_prompt: int = _opt(8, kind=int, min=1)
    updates_per_rollout: int = _opt(8, kind=int, min=1, help="optimizer steps (mini-batches) per rollout")
    micro_batch_size: int = _opt(16, kind=int, min=1, help="sequences per forward/backward (gradient accumulation)")
    lr: float = _opt(5e-4, kind=float, min=0.0)
    weight_decay: float = _opt(0.0, kind=float, min=0.0)
    grad_clip: float = _opt(1.0, kind=float, min=0.0, help="max grad norm; 0 disables")
    temperature: float = _opt(1.0, kind=float, min=1e-6, help="rollout temperature")
    max_new_tokens: int = _opt(8, kind=int, min=1)
    dynamic_filtering: bool = _opt(False, kind=bool, help="DAPO: drop groups whose rewards are all equal")
    max_gen_batches: int = _opt(3, kind=int, min=1, help="rollout batches tried to fill a filtered step")
    entropy_after_update: bool = _opt(
        False,
        kind=bool,
        measures=False,
        late=True,
        help="pocket: after each step's updates, one no-grad forward over the trained batch logs "
        "entropy/update_delta, the entropy change the update caused on the same states (Theorem 1)",
    )
    optimizer: str = _opt(
        "adamw",
        kind=str,
        choices=("adamw", "adamw_b1_0", "sgd"),
        late=True,
        help="pocket: adamw (betas 0.9, 0.999), adamw_b1_0 (no momentum) or sgd (plain, no momentum)",
    )
    checkpoint_every: int = _opt(
        10, kind=int, min=0, measures=False, help="steps between checkpoints; 0 = only at the end"
    )
    threads: int = _opt(1, kind=int, min=1, measures=False, help="torch CPU threads (fixed for reproducibility)")
    device: str = _opt("cpu", kind=str, measures=False, help="torch device (cpu, cuda, cuda:0, auto)")


@dataclass
class EvalConfig:
    every: int = _opt(10, kind=int, min=0, help="steps between held-out evals; 0 = only at the end")
    n_samples: int = _opt(4, kind=int, min=1, help="k of avg@k")
    temperature: float = _opt(0.6, kind=float, min=0.0)
    top_p: float = _opt(1.0, kind=float, min=0.0, max=1.0)
    greedy: bool = _opt(True, kind=bool, help="also report greedy accuracy")
    max_problems: int | None = _opt(None, kind="int?", min=1, help="evaluate on the first N held-out problems")
    max_new_tokens: int | None = _opt(None, kind="int?", min=1, help="default: train.max_new_tokens")
    suites: list = _opt(
        [],
        kind=list,
        late=True,
        help="evaluation suites (`harness eval --list-suites`: aime24, math500, ...) for the in-loop eval of the "
        "openrlhf backend and for the after-training stage; [] = the run's own task (its held-out split)",
    )
    after_training: bool = _opt(
        False,
        kind=bool,
        late=True,
        help="after training: export the final model, score eval.suites and attach the results to this run "
        "(eval/final.json and result.json, with the run's method, seed and step)",
    )
    protocol: str = _opt(
        "suite",
        kind=str,
        choices=("suite", "section"),
        late=True,
        help="after-training protocol: each suite's own (the paper's: AIME/AMC avg@32 at T=0.6, others greedy) "
        "or this section's n_samples / temperature / top_p / max_new_tokens",
    )
    fixtures: bool = _opt(
        False, kind=bool, late=True, help="suites from the tiny shipped fixture rows (tests and the CPU rehearsal)"
    )
    data_dir: str | None = _opt(
        None,
        kind="str?",
        measures=False,
        late=True,
        help="local suite data (<suite>.jsonl/.parquet) instead of the hub",
    )
    engine: str = _opt(
        "auto",
        kind=str,
        choices=("auto", "hf", "vllm"),
        measures=False,
        late=True,
        help="after-training generation engine",
    )


@dataclass
class LoggingConfig:
    tensorboard: bool = _opt(False, kind=bool, measures=False)
    wandb: bool = _opt(False, kind=bool, measures=False)
    wandb_project: str = _opt("entropy-harness", kind=str, measures=False)
    wandb_mode: str = _opt("offline", kind=str, choices=("offline", "online", "disabled"), measures=False)
    progress: bool = _opt(True, kind=bool, measures=False, help="tqdm progress bar")
    wandb_entity: str | None = _opt(
        None, kind="str?", measures=False, late=True, help="W&B entity (team or user); default: the account's"
    )
    wandb_group: str | None = _opt(
        None, kind="str?", measures=False, late=True, help="W&B group; a sweep sets it to the sweep's name"
    )
    wandb_tags: list = _opt(
        [],
        kind=list,
        measures=False,
        late=True,
        help="extra W&B tags; every run is tagged method:, model:, size: (when the name carries it), seed:",
    )


@dataclass
class RunConfig:
    backend: str = _opt("pocket", kind=str)
    seed: int = _opt(0, kind=int, min=0)
    name: str | None = _opt(None, kind="str?")
    method: dict = _opt({"name": "grpo"}, kind=dict, help="{name: <method>, <hyperparameter>: value}")
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    openrlhf: dict = _opt(
        {}, kind=dict, help="OpenRLHF-backend section (harness.backends.openrlhf.options; pocket ignores it)"
    )

    # -- helpers ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def run_id(self) -> str:
        """12-hex hash of the resolved config's measuring settings: the run's identity (``run_id_of``)."""
        return run_id_of(self.to_dict())

    @property
    def method_name(self) -> str:
        return self.method["name"]

    @property
    def method_hparams(self) -> dict:
        return {k: v for k, v in self.method.items() if k != "name"}


def config_hash(d: Mapping) -> str:
    """12-hex hash of any JSON-able mapping (for a run config use ``run_id_of``)."""
    blob = json.dumps(d, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- identity
def _fields_where(cls, key: str, value, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> default of every field whose metadata ``key`` equals ``value``, under dataclass ``cls``."""
    out = {}
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out.update(_fields_where(type(default), key, value, path + "."))
        elif f.metadata.get(key, {"measures": True, "late": False}[key]) == value:
            out[path] = default
    return out


def _declared(key: str, value) -> dict[str, Any]:
    from harness.backends import owned_sections

    out = _fields_where(RunConfig, key, value)
    for path, cls in owned_sections().items():
        out.update(_fields_where(cls, key, value, path + "."))
    return out


@functools.cache
def non_measuring_fields() -> dict[str, Any]:
    """Every config field that does not change what a run measures (core and backend sections) -> its default
    (read-only: cached)."""
    return _declared("measures", False)


@functools.cache
def late_fields() -> dict[str, Any]:
    """Every field declared ``late=True`` -> its default: in the run id only when set to another value."""
    return _declared("late", True)


def _flatten(d: Mapping, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def measuring_items(cfg: Mapping | RunConfig) -> dict:
    """Flat ``{dotted.key: value}`` of the settings that change what a run measures (all but logging, paths and
    resources; see ``opt(measures=...)``). The results code groups and labels runs by these."""
    d = cfg.to_dict() if isinstance(cfg, RunConfig) else cfg
    skip = non_measuring_fields()
    return {k: v for k, v in _flatten(d).items() if k not in skip}


def identity_dict(d: Mapping) -> dict:
    """``d`` with every non-measuring field reset to its default (a field missing stays missing) and every late
    field left at its default dropped. Resetting instead of dropping keeps the run ids of configs that use the
    defaults as they were before identity was declared; dropping keeps them as they were before a late field."""
    d = copy.deepcopy(dict(d))
    for path, default in [*non_measuring_fields().items(), *late_fields().items()]:
        *parents, last = path.split(".")
        node = d
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            if path in non_measuring_fields():
                node[last] = copy.deepcopy(default)
            if path in late_fields() and node[last] == default:
                del node[last]
    return d


def run_id_of(d: Mapping) -> str:
    """The run id of a resolved config dict: changing only logging, paths or resources keeps it."""
    return config_hash(identity_dict(d))


# ---------------------------------------------------------------------------------------------- building
def parse_override(text: str) -> tuple[list[str], Any]:
    """``train.steps=5`` -> (['train', 'steps'], 5); the value is parsed as YAML (``method={name: grpo}`` works)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.path=value, e.g. train.steps=5")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {text!r}: bad key path {key!r}")
    from harness.io import load_yaml, yaml_problem

    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({yaml_problem(e)})") from None
    return key.split("."), value


def apply_overrides(data: dict, overrides) -> dict:
    from harness.run.keypaths import set_path

    data = copy.deepcopy(data)
    for text in overrides or []:
        keys, value = parse_override(text)
        try:
            set_path(data, ".".join(keys), value)
        except ValueError as e:
            raise ConfigError(f"override {text!r}: {e}") from None
    return data


def read_config_file(path: str | os.PathLike) -> dict:
    from harness.io import read_yaml_mapping

    return read_yaml_mapping(
        path, ConfigError, "a run config", "sections backend, seed, method, model, task, train, eval, logging"
    )


def load_config(
    source: str | os.PathLike | Mapping | RunConfig, overrides=None, check_method: bool = True
) -> RunConfig:
    """Validate a run config (dict, YAML path or RunConfig) with ``key=value`` overrides; raise ConfigError.

    The chosen backend validates (and types) its own sections here, for every backend alike;
    ``check_method=False`` skips the method registry and the backend (a schema-only check)."""
    if isinstance(source, RunConfig):
        data = source.to_dict()
    elif isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
    else:
        data = read_config_file(source)
    data = apply_overrides(data, overrides)
    cfg = _build(RunConfig, data, "")
    backend = _backend(cfg)
    _check_logging_and_device(cfg)
    _check_method_section(cfg, check_method)
    if check_method and hasattr(backend, "validate"):  # every built-in backend has one
        backend.validate(cfg)
    if check_method:
        _check_can_update(cfg)
    if cfg.eval.top_p <= 0:
        raise ConfigError(f"eval.top_p: {cfg.eval.top_p} keeps no token; allowed: 0 < top_p <= 1")
    if cfg.eval.temperature == 0 and cfg.eval.n_samples > 1:
        raise ConfigError(
            f"eval.n_samples: {cfg.eval.n_samples} at eval.temperature: 0 are identical greedy samples; "
            f"set eval.n_samples: 1 (greedy accuracy is eval.greedy) or eval.temperature > 0"
        )
    _check_eval_suites(cfg)
    return cfg


def _check_eval_suites(cfg: RunConfig) -> None:
    """Every name in ``eval.suites`` is a registered suite (did-you-mean otherwise)."""
    if not cfg.eval.suites:
        return
    from harness.evals.suites import resolve_suites

    try:
        resolve_suites(cfg.eval.suites)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"eval.suites: {e.args[0] if e.args else e}") from None


def _check_can_update(cfg: RunConfig) -> None:
    """Refuse configs under which no step can ever update the policy (integrity, issue #16 item 4): one response
    per prompt with dynamic filtering (every group has equal rewards), or with an estimator whose advantage is
    zero for a group of one (a group baseline such as GRPO's mean or RLOO's leave-one-out)."""
    spp = cfg.train.samples_per_prompt
    if spp > 1:
        return
    if cfg.train.dynamic_filtering:
        raise ConfigError(
            f"train.samples_per_prompt: {spp} with train.dynamic_filtering: true filters every group "
            f"(one response always has equal rewards), so no step can update; use >= 2"
        )
    import torch

    from harness.kernel.method import ADVANTAGES, get_method

    m = get_method(cfg.method_name, **cfg.method_hparams)
    est = ADVANTAGES.get(m.advantage)
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(2, 3)
    extras = {e: -torch.rand(2, 3, generator=gen) for e in est.extras}
    try:
        adv = m.advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), mask, **extras)
    except Exception:  # noqa: BLE001 - an estimator that cannot be probed this way is left to min_group_size
        return
    if bool((adv == 0).all()):
        raise ConfigError(
            f"train.samples_per_prompt: {spp}; the {m.advantage} advantage estimator gives a group of "
            f"one response a zero advantage (a group baseline), so no step can update; use >= 2"
        )


def _backend(cfg: RunConfig):
    from harness.backends import get_backend

    return get_backend(cfg.backend)


def _check_logging_and_device(cfg: RunConfig) -> None:
    import importlib.util
    import re

    if cfg.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            "logging.tensorboard: true needs the tensorboard package (pip install tensorboard, or the "
            "project's 'log' extra); set it to false to run without"
        )
    if cfg.logging.wandb and cfg.logging.wandb_mode != "disabled" and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            "logging.wandb: true needs the wandb package (pip install wandb; wandb_mode: offline needs "
            "no network or account); set it to false to run without"
        )
    if not re.fullmatch(r"cpu|auto|mps|cuda(:\d+)?", cfg.train.device):
        raise ConfigError(
            f"train.device: {cfg.train.device!r} is not allowed. Allowed: cpu, cuda, cuda:<index>, mps, auto"
        )


def _check_method_section(cfg: RunConfig, check_method: bool) -> None:
    """Validate the method through the registry and fill in its defaults, so that ``{name: grpo}`` and
    ``{name: grpo, eps_low: 0.2}`` are one config (one run id) and config.yaml records every hyperparameter."""
    name = cfg.method.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("method.name: required, the name of a registered method (see `harness methods`)")
    if not check_method:
        return
    from harness.kernel.method import get_method

    try:
        cfg.method = get_method(name, **cfg.method_hparams).to_config()
        if ":" in name:  # `package.module:Name`: keep the reference, so every process that reads config.yaml finds it
            cfg.method["name"] = name
    except (KeyError, ValueError, TypeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(f"method: {msg}") from None


def diff_configs(a: Mapping, b: Mapping, prefix: str = "") -> list[str]:
    """Dotted key paths whose values differ between two config dicts (for 'different config' errors)."""
    out = []
    for k in sorted(set(a) | set(b), key=str):
        p = f"{prefix}.{k}" if prefix else str(k)
        va, vb = a.get(k, "<missing>"), b.get(k, "<missing>")
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += diff_configs(va, vb, p)
        elif va != vb:
            out.append(f"{p}: {va!r} -> {vb!r}")
    return out
