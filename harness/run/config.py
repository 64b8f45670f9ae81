"""Run-config schema and validation (docs/contracts.md §5).

A run config is pure-data YAML with the sections ``backend, seed, name, method, model, task, train, eval,
logging`` and the sections backends own (``Backend.sections``: a top-level section such as a backend's own, or a
sub-section such as ``model.warm_start``). ``load_config`` applies ``key.path=value`` overrides, checks every key
and value before any work, and returns a typed ``RunConfig``. The core sections live here and name no backend; the
run's backend types the sections it owns (``build_section``) and checks what it can run (``validate``) at the same
moment, and a section only other backends own is refused unless empty. Errors name the key path, the bad value
and what is allowed; unknown keys, tasks and model sizes get a did-you-mean (``harness.errors``).

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
from harness.kernel.fields import default_of
from harness.kernel.fields import opt as _opt


def _default_backend() -> str:
    from harness.backends import DEFAULT_BACKEND

    return DEFAULT_BACKEND


def _default_model() -> str | None:
    from harness.backends import default_model

    return default_model()


def _default_task() -> str | None:
    from harness.backends import default_task

    return default_task()


# ---------------------------------------------------------------------------------------------- sections
@dataclass
class ModelConfig:
    name: str = _opt(
        factory=_default_model,
        kind=str,
        help="a model the backend knows by name, a Hugging Face hub id or a local HF directory (default: the "
        "default backend's default model)",
    )
    warm_start: Any = _opt({}, kind=dict, help="a backend's warm-start section (typed by the backends that own it)")
    dtype: str = _opt("float32", kind=str, choices=("float32", "bfloat16", "float16"))
    cache_dir: str | None = _opt(
        None, kind="str?", measures=False, help="warm-start cache (default: $HARNESS_CACHE or ~/.cache/entropy-harness)"
    )


@dataclass
class TaskConfig:
    name: str = _opt(
        factory=_default_task,
        kind=str,
        help="a task the backend knows by name, or a JSONL file of {prompt, answer} (default: the default backend's)",
    )
    test_size: int = _opt(200, kind=int, low=1, help="held-out problems for evaluation")
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
    steps: int = _opt(50, kind=int, low=1)
    prompts_per_step: int = _opt(16, kind=int, low=1)
    samples_per_prompt: int = _opt(8, kind=int, low=1)
    updates_per_rollout: int = _opt(8, kind=int, low=1, help="optimizer steps (mini-batches) per rollout")
    micro_batch_size: int = _opt(16, kind=int, low=1, help="sequences per forward/backward (gradient accumulation)")
    lr: float = _opt(
        5e-4, kind=float, low=0.0, low_open=True, why="at lr 0 the run cannot learn (`harness eval` scores a model)"
    )
    weight_decay: float = _opt(0.0, kind=float, low=0.0)
    grad_clip: float = _opt(1.0, kind=float, low=0.0, help="max grad norm; 0 disables")
    temperature: float = _opt(1.0, kind=float, low=1e-6, help="rollout temperature")
    max_new_tokens: int = _opt(8, kind=int, low=1)
    dynamic_filtering: bool = _opt(False, kind=bool, help="DAPO: drop groups whose rewards are all equal")
    max_gen_batches: int = _opt(3, kind=int, low=1, help="rollout batches tried to fill a filtered step")
    entropy_after_update: bool = _opt(
        False,
        kind=bool,
        measures=False,
        late=True,
        help="after each step's updates, one no-grad forward over the trained batch logs entropy/update_delta, the "
        "entropy change the update caused on the same states (Theorem 1); backends with that capability",
    )
    optimizer: str = _opt(
        "adamw",
        kind=str,
        late=True,
        help="the policy optimizer: adamw (betas 0.9, 0.999) on every backend; each backend checks the ones it has",
    )
    old_log_probs: str = _opt(
        "rollout",
        kind=str,
        choices=("rollout", "recompute"),
        late=True,
        help="where the loss's old log-probs come from: rollout = the sampling pass (noise vs the training forward, "
        "as the official code's separate pass); recompute = a no-grad forward of each micro-batch with the "
        "training forward's shapes before the step's first update (log r exactly 0 there); backends check theirs",
    )
    checkpoint_every: int = _opt(
        10, kind=int, low=0, measures=False, help="steps between checkpoints; 0 = only at the end"
    )
    threads: int = _opt(
        1, kind=int, low=1, measures=False, help="torch CPU threads of an in-process backend (fixed: reproducible)"
    )
    device: str = _opt(
        "cpu", kind=str, measures=False, help="torch device of an in-process backend (cpu, cuda, cuda:0, mps, auto)"
    )


def _int_or_auto(value) -> str | None:
    """What an engine size allows: a positive integer or ``auto``."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return "allowed: a positive integer or auto"


@dataclass
class EvalConfig:
    every: int = _opt(10, kind=int, low=0, help="steps between held-out evals; 0 = only at the end")
    n_samples: int = _opt(4, kind=int, low=1, help="k of avg@k")
    temperature: float = _opt(0.6, kind=float, low=0.0)
    top_p: float = _opt(1.0, kind=float, low=0.0, high=1.0)
    greedy: bool = _opt(True, kind=bool, help="also report greedy accuracy")
    max_problems: int | None = _opt(None, kind="int?", low=1, help="evaluate on the first N held-out problems")
    max_new_tokens: int | None = _opt(None, kind="int?", low=1, help="default: train.max_new_tokens")
    suites: list = _opt(
        [],
        kind=list,
        late=True,
        help="evaluation suites (`harness eval --list-suites`: aime24, math500, ...) for the in-loop eval of a "
        "backend with that capability and for the after-training stage; [] = the run's own task (its held-out split)",
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
    # the after-training vLLM engine (resources: never in the run id; auto = the backend's evaluation plan,
    # docs/gpu.md "Evaluation plan"; 1, 1 and vLLM's own choice where a backend has no plan)
    tensor_parallel_size: int | str = _opt(
        "auto", kind=object, check=_int_or_auto, measures=False, late=True, help="GPUs per vLLM engine, or auto"
    )
    data_parallel_size: int | str = _opt(
        "auto",
        kind=object,
        check=_int_or_auto,
        measures=False,
        late=True,
        help="vLLM engines (one per group of tensor_parallel_size GPUs), or auto",
    )
    max_model_len: int | str = _opt(
        "auto",
        kind=object,
        check=_int_or_auto,
        measures=False,
        late=True,
        help="vLLM context length (prompt + new tokens), or auto (the plan's prompt allowance + longest max_tokens)",
    )
    gpu_memory_utilization: float = _opt(
        0.85,
        kind=float,
        low=0.0,
        low_open=True,
        high=1.0,
        measures=False,
        late=True,
        help="fraction of each GPU's memory the vLLM engine may take (weights + KV cache + activations)",
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
    backend: str = _opt(factory=_default_backend, kind=str)
    seed: int = _opt(0, kind=int, low=0)
    name: str | None = _opt(None, kind="str?")
    method: dict = _opt({"name": "grpo"}, kind=dict, help="{name: <method>, <hyperparameter>: value}")
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    # top-level sections backends own (name -> typed section, or {} for one every run records): read as attributes
    # (``cfg.<section>``) and recorded after the core sections by ``to_dict``
    backend_sections: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        from harness.backends import recorded_sections

        for name in recorded_sections():
            self.backend_sections.setdefault(name, {})

    def __getattr__(self, name: str):  # only called when ordinary lookup fails: a backend's section
        sections = self.__dict__.get("backend_sections")
        if sections is not None and name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        sections = self.__dict__.get("backend_sections")
        if sections is not None and name in sections:
            sections[name] = value
        else:
            object.__setattr__(self, name, value)

    # -- helpers ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(d.pop("backend_sections"))
        return d

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
        if not f.init:
            continue
        path = prefix + f.name
        default = default_of(f)
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


SECTIONS_HINT = "sections backend, seed, method, model, task, train, eval, logging"
EMPTY_HINT = "write {} for a run config of all defaults"


def read_config_file(path: str | os.PathLike) -> dict:
    """A run-config YAML file as a mapping; an empty (or comment-only) file is refused: ``{}`` says all defaults."""
    from harness.io import read_yaml_mapping

    return read_yaml_mapping(path, ConfigError, "a run config", SECTIONS_HINT, empty=EMPTY_HINT)


WRITTEN_ORDER = ["backend", "seed", "name", "method", "model", "task", "train", "eval", "logging"]  # to_yaml's
WRITTEN_SECTIONS = tuple(k for k in WRITTEN_ORDER if k != "name")  # required of a stored config; name optional


def cut_short(stored: Mapping) -> str:
    """'' when ``stored`` holds every top-level section the harness writes into a run directory's config.yaml
    (resolved, since the first release), else the one wording for the gap, which means a cut or hand-edited file,
    not another run: ``no eval, logging sections (the harness writes them all: cut short or edited by hand)``."""
    gap = [k for k in WRITTEN_SECTIONS if k not in stored]
    if not gap:
        return ""
    plural = "s" * (len(gap) > 1)
    return f"no {', '.join(gap)} section{plural} (the harness writes them all: cut short or edited by hand)"


def build_config(data: Mapping) -> RunConfig:
    """A ``RunConfig`` typed from a mapping: the core sections, then each section the run's backend owns
    (``Backend.build_section``), after the backend's ``canonical`` spelling. A section that only other backends own
    is refused unless it is empty (every run records some as ``{}``), like an unknown key: it names the backends it
    belongs to. No cross-field checks (``load_config`` runs those)."""
    from harness.backends import BACKENDS, get_backend, section_owners

    owners = section_owners()
    top = tuple(p for p in owners if "." not in p)
    named = data.get("backend", _default_backend())
    if isinstance(named, str) and named in BACKENDS.names():  # an unknown name is the schema's error, below
        data = get_backend(named).canonical(data)
    data = dict(data)
    given = {p: data.pop(p) for p in top if p in data}
    cfg = _build(RunConfig, data, "", also=top)
    backend = get_backend(cfg.backend)
    for path, names in owners.items():
        value = given.get(path) if path in top else _get_path(cfg, path)
        if backend.name in names:
            _set_path(cfg, path, backend.build_section(path, value))
        elif value not in (None, {}):
            first = f"{path}.{next(iter(value))}" if isinstance(value, Mapping) else path
            raise ConfigError(
                f"{first}: {path} belongs to the {' and '.join(names)} backend{'s' * (len(names) > 1)}, and this "
                f"run's backend is {backend.name}; remove it (or set backend: {names[0]})"
            )
    return cfg


def _get_path(cfg: RunConfig, path: str):
    node = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


def _set_path(cfg: RunConfig, path: str, value) -> None:
    *parents, last = path.split(".")
    if not parents:
        cfg.backend_sections[last] = value
        return
    setattr(_get_path(cfg, ".".join(parents)), last, value)


def load_config(
    source: str | os.PathLike | Mapping | RunConfig, overrides=None, check_method: bool = True
) -> RunConfig:
    """Validate a run config (dict, YAML path or RunConfig) with ``key=value`` overrides; raise ConfigError.

    The chosen backend types its own sections and validates the config here, for every backend alike;
    ``check_method=False`` skips the method registry and the backend's ``validate`` (a schema-only check)."""
    if isinstance(source, RunConfig):
        data = source.to_dict()
    elif isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
    else:
        data = read_config_file(source)
    data = apply_overrides(data, overrides)
    cfg = build_config(data)
    backend = _backend(cfg)
    _check_logging_and_device(cfg)
    _check_method_section(cfg, check_method)
    if check_method:
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
