"""Expand a sweep spec into cells: grid x zip x seeds, minus exclude, each validated before anything runs.

A cell's id is the 12-hex hash of its *resolved* run config (``RunConfig.run_id()``, the same hash a run
records in result.json), so the identity never depends on a job id, a timestamp or the resources. Its alias
is readable, built from the values of the axes that vary (first path of each zip entry; ``s<seed>``), model
first, then method, task, the other axes, the seed last, lower case: ``qwen2.5-7b__kl_cov__s0``. A mapping
value contributes its ``name``; when two cells would share an alias,
their mapping values also spell out their other keys (``kl_cov-k_ratio0.002``).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.run import keypaths as paths
from harness.sweeps.resources import merged, with_layout
from harness.sweeps.spec import SpecError, SweepSpec

Validator = Callable[[dict], dict]


@dataclass
class Cell:
    id: str  # hash of the resolved config: the run's identity
    alias: str  # readable, from the varying axis values
    config: dict  # resolved run config (what config.yaml holds)
    axes: dict[str, Any]  # path -> value this cell got from the spec's axes
    resources: dict = field(default_factory=dict)
    index: int = 0  # position in the expansion order

    @property
    def dirname(self) -> str:
        return f"{self.alias}__{self.id}"


def run_config_validator(raw: dict) -> dict:
    """The default validator: ``harness.run.config.load_config`` (checks every key and the method name)."""
    from harness.run.config import load_config

    return load_config(raw).to_dict()


def config_id(resolved: Mapping) -> str:
    from harness.run.config import run_id_of

    return run_id_of(resolved)


def expand(spec: SweepSpec, validate: Validator | None = run_config_validator) -> list[Cell]:
    """All cells of ``spec`` in a stable order; raises ``SpecError`` naming the first bad cell and key."""
    raws = []
    for point in itertools.product(*[range(len(a.values)) for a in spec.axes]):
        raw = copy.deepcopy(spec.base)
        axes: dict[str, Any] = {}
        for axis, j in zip(spec.axes, point):
            for p, v in zip(axis.paths, axis.values[j]):
                try:
                    paths.set_path(raw, p, v)
                except ValueError as e:
                    raise SpecError(f"{axis.where}: {e}") from None
                axes[p] = v
        raws.append((raw, axes))

    used_excludes = [False] * len(spec.exclude)
    kept = []
    for raw, axes in raws:
        hits = [i for i, clause in enumerate(spec.exclude) if paths.matches(raw, clause)]
        for i in hits:
            used_excludes[i] = True
        if not hits:
            kept.append((raw, axes))
    for i, used in enumerate(used_excludes):
        if not used:
            raise SpecError(f"exclude[{i}]: matches no cell ({spec.exclude[i]}); check the paths and values")
    if not kept:
        raise SpecError("exclude removes every cell: nothing left to run")

    aliases = make_aliases(spec, [a for _, a in kept])
    used_groups = [False] * len(spec.resource_groups)
    cells: list[Cell] = []
    for n, ((raw, axes), alias) in enumerate(zip(kept, aliases)):
        try:
            resolved = validate(raw) if validate else copy.deepcopy(raw)
        except (ValueError, KeyError, TypeError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            shown = ", ".join(f"{p}={_short(v)}" for p, v in axes.items())
            raise SpecError(f"cell {alias} ({shown}): {msg}") from None
        layers = []
        for i, g in enumerate(spec.resource_groups):
            if paths.matches(raw, g["match"]):
                used_groups[i] = True
                layers.append({k: v for k, v in g.items() if k != "match"})
        explicit = set(spec.resources_default).union(*layers)
        try:
            resources = with_layout(resolved, merged(spec.resources_default, *layers), explicit, f"cell {alias}")
        except ValueError as e:
            raise SpecError(str(e)) from None
        cells.append(
            Cell(id=config_id(resolved), alias=alias, config=resolved, axes=axes, resources=resources, index=n)
        )
    for i, used in enumerate(used_groups):
        if not used:
            raise SpecError(f"resources.groups[{i}].match: matches no cell ({spec.resource_groups[i]['match']})")
    seen: dict[str, Cell] = {}
    for c in cells:
        if c.id in seen:
            raise SpecError(
                f"cells {seen[c.id].alias} and {c.alias} resolve to the same run config (id {c.id}); "
                f"remove the duplicate axis value"
            )
        seen[c.id] = c
    return cells


# ---------------------------------------------------------------------------------------------- aliases
def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _short(v: Any) -> str:
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    return _fmt(v)


def _part(path: str, value: Any, full: bool) -> str:
    key = path.rsplit(".", 1)[-1]
    if path == "seed":
        return f"s{value}"
    if isinstance(value, Mapping):
        name = value.get("name")
        rest = {k: v for k, v in value.items() if k != "name"}
        head = _fmt(name) if name is not None else ""
        if full or name is None:
            tail = "-".join(f"{k}{_fmt(v) if not isinstance(v, Mapping) else len(v)}" for k, v in sorted(rest.items()))
            return "-".join(x for x in (head, tail) if x) or key
        return head
    if key == "name":
        return _fmt(value).rstrip("/").rsplit("/", 1)[-1]  # Qwen/Qwen2.5-7B -> Qwen2.5-7B
    return f"{key}{_fmt(value)}"


def _clean(text: str) -> str:
    text = re.sub(r"[^a-z0-9._=-]+", "-", text.lower()).strip("-")
    return text[:100] or "cell"


ALIAS_ORDER = ("model", "method", "task")  # then the other axes in spec order, the seed last


def _alias_rank(path: str) -> int:
    if path == "seed":
        return len(ALIAS_ORDER) + 1
    top = path.split(".", 1)[0]
    return ALIAS_ORDER.index(top) if top in ALIAS_ORDER else len(ALIAS_ORDER)


def make_aliases(spec: SweepSpec, cell_axes: list[dict[str, Any]]) -> list[str]:
    """One alias per cell from the axes with more than one value (always the seed); unique within the sweep."""
    shown = sorted((a.paths[0] for a in spec.axes if len(a.values) > 1 or a.paths == ["seed"]), key=_alias_rank)

    def alias(axes: dict, full: bool) -> str:
        return _clean("__".join(_part(p, axes[p], full) for p in shown)) if shown else spec.name

    out = [alias(a, False) for a in cell_axes]
    counts: dict[str, int] = {}
    for a in out:
        counts[a] = counts.get(a, 0) + 1
    out = [alias(ax, True) if counts[a] > 1 else a for a, ax in zip(out, cell_axes)]
    seen: dict[str, int] = {}
    for i, a in enumerate(out):  # still equal: axes that differ only outside their first path
        if a in seen:
            seen[a] += 1
            out[i] = f"{a}-{seen[a]}"
        else:
            seen[a] = 0
    return out
