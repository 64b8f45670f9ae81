"""The one field language: ``opt`` declares a typed field, ``check_value`` checks a value against it, ``build`` types a
config section (a dataclass) from a mapping.

Every typed setting is declared with ``opt``: the core run-config sections (harness/run/config.py), each backend's
sections (harness/backends/*/options.py), method hyperparameters (``harness.hparam`` is this ``opt``),
advantage-estimator options (``harness.option`` is this ``opt`` too), task options (``Task.options_schema``) and a
sweep's resource keys (harness/sweeps/resources.py), so one value is read, refused and reported by the same rules
everywhere. Numbers written as strings (YAML 1.1 reads ``2e-3`` and ``1e9`` as strings) are read as
numbers; an integer field takes an integral float (``1e9`` -> 1000000000) and refuses any other.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from harness.errors import ConfigError, suggestion

NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")  # YAML 1.2 decimal and scientific forms
INTEGER = re.compile(r"[-+]?\d+")
KINDS = (bool, int, float, str, dict, list, "str?", "int?", "float?", object)  # object: any value
# a dataclass annotation (a string under `from __future__ import annotations`) -> the kind it implies
_ANNOTATED = {
    **{t.__name__: t for t in (bool, int, float, str, dict)},
    **{f"{t} | None": f"{t}?" for t in ("str", "int", "float")},
    **{f"Optional[{t}]": f"{t}?" for t in ("str", "int", "float")},
}
_WHAT = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}


def opt(
    default=None,
    help: str = "",
    *,
    kind=None,
    choices=None,
    low=None,
    high=None,
    low_open: bool = False,
    off=None,
    why: str = "",
    check=None,
    measures: bool = True,
    late: bool = False,
    factory=None,
):
    """A typed, documented field (a ``dataclasses.field``).

    ``kind``: one of ``KINDS`` (``'int?'`` etc. also take null; ``list`` is a list of names, ``choices`` then applies
    to each; ``object``: any value); None: the field's annotation (``float``, ``str | None``, ...) or else the
    default's type; a field of no known kind is not type-checked. ``choices``: the allowed values. ``low``/``high``:
    an inclusive range, ``low_open=True`` makes the lower bound strict. ``off``: a value that switches the feature
    off and skips the range check (``clip_ratio_c=0``). ``why``: appended to a range refusal (the reason for the
    bound). ``check``: what the keywords cannot say, ``check(value) -> None`` or the text of what is allowed.
    ``factory``: a callable giving the default (instead of ``default``).

    Run identity: ``measures=False`` marks a setting that does not change what a run measures (logging, paths,
    resources): its value is reset to the default in the run id. ``late=True`` marks a field added after run ids were
    published: it enters the run id only when set to another value than its default, so every config that leaves it
    alone keeps its id (a non-measuring late field needs both). A method's section is its identity as a whole, so a
    method hyperparameter or estimator option declared ``measures=False`` is refused when it is registered."""
    if kind is not None and kind not in KINDS:
        raise TypeError(f"opt: kind={kind!r} is not one of {', '.join(map(_kind_name, KINDS))}")
    meta = {
        "kind": kind,
        "choices": tuple(choices) if choices is not None else None,
        "low": low,
        "high": high,
        "low_open": low_open,
        "off": off,
        "why": why,
        "check": check,
        "help": help,
        "measures": measures,
        "late": late,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default value (its factory's result when it has one); MISSING when it has none."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def spec(f: dataclasses.Field) -> dict:
    """The field's metadata with its kind resolved: declared, else from its annotation, else from its default."""
    meta = dict(f.metadata)
    kind = meta.get("kind")
    if kind is None:
        kind = _ANNOTATED.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
    if kind is None and f.type is None:  # a field outside a dataclass (an estimator option): its default's type
        default = default_of(f)
        kind = type(default) if type(default) in (bool, int, float, str, dict) else None
    meta["kind"] = kind
    return meta


def _kind_name(kind) -> str:
    return kind if isinstance(kind, str) else kind.__name__


def _number(value: Any, path: str, kind, error: type[Exception]):
    """``value`` as an int (``kind is int``) or a finite float; a number written as a string is read as one."""
    what = _WHAT[kind]
    if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        value = int(value) if INTEGER.fullmatch(value.strip()) else float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{path}: expected {what}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{path}: expected a finite number, got {value!r}")
    if kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise error(f"{path}: expected an integer, got {value!r}")
            value = int(value)
        return value
    return float(value)


def check_value(value: Any, meta: Mapping, path: str, error: type[Exception] = ConfigError) -> Any:
    """``value`` checked against a field's metadata (``spec(f)`` or ``opt``'s keywords); returns it typed (an int
    given for a float as a float, a number written as a string as the number). Raises ``error`` naming ``path``, the
    value and what is allowed."""
    given, kind = value, meta.get("kind")
    if isinstance(kind, str):  # "str?", "int?", "float?"
        if value is None:
            return None
        kind = {"str?": str, "int?": int, "float?": float}[kind]
    choices = meta.get("choices")
    if kind is bool:
        if not isinstance(value, bool):
            raise error(f"{path}: expected true or false, got {value!r}")
    elif kind in (int, float):
        value = _number(value, path, kind, error)
    elif kind is str:
        if isinstance(value, bool) and choices and str(value).lower() in choices:
            value = str(value).lower()  # `enabled: true` in YAML
        if not isinstance(value, str):
            raise error(f"{path}: expected a string, got {value!r}")
    elif kind is dict:
        if not isinstance(value, dict):
            raise error(f"{path}: expected a mapping, got {value!r}")
        value = copy.deepcopy(value)
    elif kind is list:
        if isinstance(value, str):  # `suites: math500` or `suites: aime24,math500`
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise error(f"{path}: expected a list of names, got {value!r}")
        return [check_value(v, {**meta, "kind": str}, f"{path}[{i}]", error) for i, v in enumerate(value)]
    if choices is not None and value not in choices:
        raise error(
            f"{path}: {given!r} is not allowed.{suggestion(value, choices)} Allowed: {', '.join(map(str, choices))}"
        )
    off = meta.get("off")
    if off is not None and value == off:
        return value
    low, high = meta.get("low"), meta.get("high")
    why = f"; {meta['why']}" if meta.get("why") else ""
    if low is not None and (value < low or (meta.get("low_open") and value == low)):
        alt = f" (or {off!r}: off)" if off is not None else ""
        raise error(f"{path}: {given!r} must be {'>' if meta.get('low_open') else '>='} {low}{alt}{why}")
    if high is not None and value > high:
        raise error(f"{path}: {given!r} must be <= {high}{why}")
    problem = meta["check"](value) if meta.get("check") else None
    if problem:
        raise error(f"{path}: {given!r} is not allowed; {problem}")
    return value


def as_recorded(given: Any, typed: Any) -> Any:
    """What a config records for an option of an open mapping (estimator, task options) checked from ``given``: the
    typed value (``2e-3`` -> 0.002, ``1e3`` for an integer -> 1000), except an integer given for a float option,
    recorded as written (``alpha: 1``), as the run ids published before these options were typed hash it."""
    return given if type(given) is int and type(typed) is float else typed


def refuse_non_measuring(fields, owner: str) -> None:
    """A method's hyperparameters and estimator options are its identity: ``measures=False`` is refused there."""
    bad = [name for name, f in fields if f.metadata.get("measures") is False]
    if bad:
        raise TypeError(
            f"{owner}: {', '.join(bad)} declared measures=False; a method's section is its run identity as a whole "
            f"(declare an option added after run ids were published with late=True)"
        )


def build(cls, data: Any, path: str, error: type[Exception] = ConfigError, also: tuple[str, ...] = ()):
    """The dataclass ``cls`` from a mapping: unknown keys refused (did-you-mean over the fields and ``also``, the
    other keys allowed there), each value checked with ``check_value``, nested sections built in turn."""
    if data is None:
        data = {}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    if not isinstance(data, Mapping):
        raise error(f"{path or 'config'}: expected a mapping of {', '.join(fields)}, got {data!r}")
    unknown = [k for k in data if k not in fields]
    if unknown:
        k, allowed = unknown[0], [*fields, *also]
        where = f"{path}.{k}" if path else str(k)
        under = f" under {path}" if path else ""
        close = suggestion(k, allowed, cutoff=0.4)  # key names are short: `gpus` for gpus_per_node
        raise error(f"{where}: unknown key.{close} Allowed keys{under}: {', '.join(allowed)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        sub = f"{path}.{name}" if path else name
        default = default_of(f)
        if dataclasses.is_dataclass(default):
            kwargs[name] = build(type(default), data[name], sub, error)
        else:
            kwargs[name] = check_value(data[name], spec(f), sub, error)
    return cls(**kwargs)
