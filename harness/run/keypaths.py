"""Dotted key paths into nested mappings: ``get_path(cfg, "model.name")``, ``set_path``, ``matches``."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MISSING = object()


def split(path: str) -> list[str]:
    """``"train.lr"`` -> ``["train", "lr"]``; empty segments are an error."""
    if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
        raise ValueError(f"bad key path {path!r}: expected dotted keys like 'model.name'")
    return path.split(".")


def get_path(data: Mapping, path: str, default: Any = MISSING) -> Any:
    node: Any = data
    for key in split(path):
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def set_path(data: dict, path: str, value: Any) -> None:
    """Set ``value`` at ``path`` (a mapping value replaces the whole subtree); creates missing parents."""
    keys = split(path)
    node = data
    for i, key in enumerate(keys[:-1]):
        nxt = node.get(key)
        if nxt is None:
            nxt = node[key] = {}
        if not isinstance(nxt, dict):
            raise ValueError(f"{'.'.join(keys[: i + 1])} is {nxt!r}, not a mapping, so {path!r} cannot be set")
        node = nxt
    node[keys[-1]] = copy.deepcopy(value)


def has_path(data: Mapping, path: str) -> bool:
    return get_path(data, path) is not MISSING


def value_matches(actual: Any, pattern: Any) -> bool:
    """A mapping pattern matches when each of its keys matches (a subset); anything else must be equal."""
    if isinstance(pattern, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and value_matches(actual[k], v) for k, v in pattern.items()
        )
    if isinstance(pattern, float) or isinstance(actual, float):
        try:
            return float(actual) == float(pattern)  # 1e-3 in YAML may arrive as a string or a float
        except (TypeError, ValueError):
            return False
    return actual == pattern


def matches(data: Mapping, where: Mapping[str, Any]) -> bool:
    """True when every ``path: value`` of ``where`` holds in ``data`` (a missing path never matches)."""
    return all(value_matches(get_path(data, p), v) for p, v in where.items())


def overlaps(a: str, b: str) -> bool:
    """Two paths overlap when one is the other or lies under it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
