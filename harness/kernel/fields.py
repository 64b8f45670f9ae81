"""Typed config sections from dataclasses: field metadata (kind, range, choices, help, measures) and building.

Used by the core run config (harness/run/config.py) and by each backend's options (harness/backends/*/options.py),
so a backend's section is checked by the same rules and messages as the core sections.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from harness.errors import ConfigError, suggestion


def opt(default=None, *, kind=None, choices=None, min=None, max=None, help="", measures=True, late=False):
    """A schema field: ``kind`` in {int, float, bool, str, 'str?', 'int?', dict, list}; numbers range-checked;
    ``kind=list`` is a list of strings (``choices`` then applies to each item).

    ``measures=False`` marks a field that does not change what a run measures (logging, progress): it is left
    out of the run id (``harness.run.config.measuring_items``). ``late=True`` marks a measuring field added after run
    ids were published: it enters the run id only when set to a value other than its default, so every config
    that leaves it at the default keeps the id it had before the field existed. A field added later that does
    not measure needs both (``measures=False, late=True``): reset to its default, then dropped."""
    meta = {"kind": kind, "choices": choices, "min": min, "max": max, "help": help, "measures": measures, "late": late}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def check_value(value: Any, meta: dict, path: str) -> Any:
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
    elif kind is list:
        if isinstance(value, str):  # `suites: math500` or `suites: aime24,math500`
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{path}: expected a list of names, got {value!r}")
        for i, v in enumerate(value):
            check_value(v, {**meta, "kind": str}, f"{path}[{i}]")
        return list(value)
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(
            f"{path}: {value!r} is not allowed.{suggestion(value, choices)} Allowed: {', '.join(map(str, choices))}"
        )
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f"{path}: {value!r} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{path}: {value!r} is above the maximum {hi}")
    return value


def build(cls, data: Any, path: str):
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        names = ", ".join(f.name for f in dataclasses.fields(cls))
        raise ConfigError(f"{path or 'config'}: expected a mapping of {names}, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        where = f"{path}.{k}" if path else str(k)
        under = f" under {path}" if path else ""
        raise ConfigError(f"{where}: unknown key.{suggestion(k, fields)} Allowed keys{under}: {', '.join(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        sub = f"{path}.{name}" if path else name
        if dataclasses.is_dataclass(f.default_factory() if f.default_factory is not dataclasses.MISSING else None):
            kwargs[name] = build(type(f.default_factory()), data[name], sub)
        else:
            kwargs[name] = check_value(data[name], f.metadata, sub)
    return cls(**kwargs)
