"""Run-config schema and validation (docs/contracts.md §5).

A run config is pure-data YAML with the sections ``backend, seed, name, method, model, task, train, eval,
logging`` (+ ``openrlhf``, a mapping passed through untouched for that backend). ``load_config`` applies
``key.path=value`` overrides, checks every key and value before any work, and returns a typed ``RunConfig``.
Errors name the key path, the bad value and what is allowed; unknown keys, tasks and model sizes get a
did-you-mean.

    cfg = load_config("sweeps/one_run.yaml", overrides=["train.steps=5", "method.name=kl_cov"])
    cfg.train.steps, cfg.to_dict(), cfg.run_id()
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

KNOWN_BACKENDS = ("pocket", "openrlhf")


class ConfigError(ValueError):
    """An invalid run config. The message names the key path and what is allowed."""


def _close(name: str, known) -> str:
    close = difflib.get_close_matches(str(name), sorted(known), n=3, cutoff=0.5)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _opt(default=None, *, kind=None, choices=None, min=None, max=None, help=""):
    """A schema field: ``kind`` in {int, float, bool, str, 'str?', 'int?', dict}; numbers range-checked."""
    meta = {"kind": kind, "choices": choices, "min": min, "max": max, "help": help}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------------------- sections
@dataclass
class WarmStartConfig:
    """Supervised warm start of a pocket model: the stand-in for a pretrained base model (pocket backend)."""

    enabled: str = _opt("auto", kind=str, choices=("auto", "true", "false"),
                        help="auto = on for pocket sizes, off for HF checkpoints")
    target_acc: float = _opt(0.3, kind=float, min=0.0, max=1.0,
                             help="stop once sampled (T=1) accuracy on held-out train problems reaches this")
    max_steps: int = _opt(3000, kind=int, min=0)
    batch_size: int = _opt(64, kind=int, min=1)
    lr: float = _opt(3e-3, kind=float, min=0.0)
    check_every: int = _opt(10, kind=int, min=1)
    min_steps: int = _opt(50, kind=int, min=0)


@dataclass
class ModelConfig:
    name: str = _opt("pocket-0.3m", kind=str, help="pocket size (pocket-0.3m, pocket-1m, pocket-4m), HF id or local HF dir")
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    dtype: str = _opt("float32", kind=str, choices=("float32", "bfloat16", "float16"))
    cache_dir: str | None = _opt(None, kind="str?", help="warm-start cache (default: $HARNESS_CACHE or ~/.cache/entropy-harness)")


@dataclass
class TaskConfig:
    name: str = _opt("arith", kind=str, help="pocket task (arith, countdown) or a JSONL file of {prompt, answer}")
    test_size: int = _opt(200, kind=int, min=1, help="held-out problems for evaluation")
    options: dict = _opt({}, kind=dict, help="task-specific options (see the task's docstring)")


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
    checkpoint_every: int = _opt(10, kind=int, min=0, help="steps between checkpoints; 0 = only at the end")
    threads: int = _opt(1, kind=int, min=1, help="torch CPU threads (fixed for reproducibility)")
    device: str = _opt("cpu", kind=str, help="torch device (cpu, cuda, cuda:0, auto)")


@dataclass
class EvalConfig:
    every: int = _opt(10, kind=int, min=0, help="steps between held-out evals; 0 = only at the end")
    n_samples: int = _opt(4, kind=int, min=1, help="k of avg@k")
    temperature: float = _opt(0.6, kind=float, min=0.0)
    top_p: float = _opt(1.0, kind=float, min=0.0, max=1.0)
    greedy: bool = _opt(True, kind=bool, help="also report greedy accuracy")
    max_problems: int | None = _opt(None, kind="int?", min=1, help="evaluate on the first N held-out problems")
    max_new_tokens: int | None = _opt(None, kind="int?", min=1, help="default: train.max_new_tokens")


@dataclass
class LoggingConfig:
    tensorboard: bool = _opt(False, kind=bool)
    wandb: bool = _opt(False, kind=bool)
    wandb_project: str = _opt("entropy-harness", kind=str)
    wandb_mode: str = _opt("offline", kind=str, choices=("offline", "online", "disabled"))
    progress: bool = _opt(True, kind=bool, help="tqdm progress bar")


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
    openrlhf: dict = _opt({}, kind=dict, help="OpenRLHF-backend extras (passed through; pocket ignores it)")

    # -- helpers ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def run_id(self) -> str:
        """12-hex hash of the resolved config: the run's identity."""
        return config_hash(self.to_dict())

    @property
    def method_name(self) -> str:
        return self.method["name"]

    @property
    def method_hparams(self) -> dict:
        return {k: v for k, v in self.method.items() if k != "name"}


def config_hash(d: Mapping) -> str:
    blob = json.dumps(d, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- building
def _check_value(value: Any, meta: dict, path: str) -> Any:
    kind = meta.get("kind")
    optional = isinstance(kind, str) and kind.endswith("?")
    if optional:
        if value is None:
            return None
        kind = {"str?": str, "int?": int}[kind]
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(f"{path}: expected an integer, got {value!r}")
    elif kind is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{path}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {value!r}")
    elif kind is str:
        if isinstance(value, bool) and meta.get("choices") and str(value).lower() in meta["choices"]:
            value = str(value).lower()  # `enabled: true` in YAML
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
    elif kind is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        value = copy.deepcopy(value)
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{path}: {value!r} is not allowed.{_close(value, choices)} Allowed: {', '.join(map(str, choices))}")
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f"{path}: {value!r} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{path}: {value!r} is above the maximum {hi}")
    return value


def _build(cls, data: Any, path: str):
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a mapping of {', '.join(f.name for f in dataclasses.fields(cls))}, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        where = f"{path}.{k}" if path else str(k)
        raise ConfigError(f"{where}: unknown key.{_close(k, fields)} Allowed keys{' under ' + path if path else ''}: {', '.join(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        sub = f"{path}.{name}" if path else name
        if dataclasses.is_dataclass(f.default_factory() if f.default_factory is not dataclasses.MISSING else None):
            kwargs[name] = _build(type(f.default_factory()), data[name], sub)
        else:
            kwargs[name] = _check_value(data[name], f.metadata, sub)
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``train.steps=5`` -> (['train', 'steps'], 5); the value is parsed as YAML (``method={name: grpo}`` works)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.path=value, e.g. train.steps=5")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {text!r}: bad key path {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({e.__class__.__name__})") from None
    return key.split("."), value


def apply_overrides(data: dict, overrides) -> dict:
    from harness.keypaths import set_path

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

    return read_yaml_mapping(path, ConfigError, "a run config",
                             "sections backend, seed, method, model, task, train, eval, logging")


def load_config(source: str | os.PathLike | Mapping | RunConfig, overrides=None, check_method: bool = True) -> RunConfig:
    """Validate a run config (dict, YAML path or RunConfig) with ``key=value`` overrides; raise ConfigError."""
    if isinstance(source, RunConfig):
        data = source.to_dict()
    elif isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
    else:
        data = read_config_file(source)
    data = apply_overrides(data, overrides)
    cfg = _build(RunConfig, data, "")
    _check_backend(cfg)
    _check_logging_and_device(cfg)
    _check_method_section(cfg, check_method)
    if cfg.backend == "pocket":
        _check_pocket(cfg)
    return cfg


def _check_logging_and_device(cfg: RunConfig) -> None:
    import importlib.util
    import re

    if cfg.logging.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("logging.tensorboard: true needs the tensorboard package (pip install tensorboard, or the "
                          "project's 'log' extra); set it to false to run without")
    if cfg.logging.wandb and cfg.logging.wandb_mode != "disabled" and importlib.util.find_spec("wandb") is None:
        raise ConfigError("logging.wandb: true needs the wandb package (pip install wandb; wandb_mode: offline needs "
                          "no network or account); set it to false to run without")
    if not re.fullmatch(r"cpu|auto|mps|cuda(:\d+)?", cfg.train.device):
        raise ConfigError(f"train.device: {cfg.train.device!r} is not allowed. Allowed: cpu, cuda, cuda:<index>, mps, auto")


def _check_backend(cfg: RunConfig) -> None:
    known = set(KNOWN_BACKENDS)
    try:
        from harness.backends import BACKENDS

        known |= set(BACKENDS._items)  # registered so far; never forces an import of a heavy backend
    except Exception:
        pass
    if cfg.backend not in known:
        raise ConfigError(f"backend: {cfg.backend!r} is not allowed.{_close(cfg.backend, known)} Allowed: {', '.join(sorted(known))}")


def _check_method_section(cfg: RunConfig, check_method: bool) -> None:
    """Validate the method through the registry and fill in its defaults, so that ``{name: grpo}`` and
    ``{name: grpo, eps_low: 0.2}`` are one config (one run id) and config.yaml records every hyperparameter."""
    name = cfg.method.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("method.name: required, the name of a registered method (see `harness methods`)")
    if not check_method:
        return
    from harness.method import get_method

    try:
        cfg.method = get_method(name, **cfg.method_hparams).to_config()
    except (KeyError, ValueError, TypeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(f"method: {msg}") from None


def _check_pocket(cfg: RunConfig) -> None:
    """Pocket-backend checks that need the task/model registries (did-you-mean for sizes and tasks)."""
    from harness.backends.pocket import models, tasks

    models.check_model_name(cfg.model.name)
    if cfg.model.warm_start.enabled == "true" and not models.is_pocket(cfg.model.name):
        raise ConfigError(f"model.warm_start.enabled: true only applies to pocket sizes; {cfg.model.name!r} is a "
                          f"pretrained checkpoint (allowed here: auto, false)")
    tasks.check_task(cfg.task.name, cfg.task.options)
    t = cfg.train
    if t.updates_per_rollout > t.prompts_per_step * t.samples_per_prompt:
        raise ConfigError(
            f"train.updates_per_rollout: {t.updates_per_rollout} mini-batches need at least that many sequences, "
            f"but a rollout has prompts_per_step*samples_per_prompt = {t.prompts_per_step * t.samples_per_prompt}")


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
