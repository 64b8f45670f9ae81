"""Parse and validate a sweep spec (YAML). Every error names the key path and what is allowed.

name: quickstart
base: {<a run config>}                       # or a path to a run-config YAML, relative to the spec
grid: {<dotted path>: [values...]}           # cartesian; a mapping value replaces that subtree
zip: [{<path>: [...], <path>: [...]}]        # each entry: axes moving together (equal lengths)
exclude: [{<path>: value, ...}]              # drop cells matching all given paths
seeds: [0, 1]                                # sets `seed`
resources: {default: {...}, groups: [{match: {<path>: value}, <resource keys>...}]}
population: auto                             # or off (default): cells that differ only in seed and method
                                             # train as one population job (harness/sweeps/population.py)
stage_dir: /shared/stage/paper               # jobs read only what `harness stage` put there, offline
                                             # (harness/sweeps/staging.py); relative to the working directory
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.io import read_yaml_mapping
from harness.registry import did_you_mean
from harness.run import keypaths as paths
from harness.sweeps.resources import check_resources

TOP_KEYS = (
    "name",
    "description",
    "base",
    "grid",
    "zip",
    "exclude",
    "seeds",
    "resources",
    "population",
    "stage_dir",
)
POPULATION_MODES = ("auto", "off")
RESOURCE_SECTION_KEYS = ("default", "groups")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SpecError(ValueError):
    """An invalid sweep spec; raised before anything is written or submitted."""


@dataclass
class Axis:
    """One independent dimension of the product: a grid axis, a zip entry (several paths) or the seeds."""

    where: str  # "grid.model.name", "zip[0]", "seeds"
    paths: list[str]  # the key paths it sets (a zip entry sets several)
    values: list[list[Any]]  # values[i] = the i-th point, one value per path


@dataclass
class SweepSpec:
    name: str
    base: dict
    axes: list[Axis]
    exclude: list[dict] = field(default_factory=list)
    resources_default: dict = field(default_factory=dict)
    resource_groups: list[dict] = field(default_factory=list)  # each: {"match": {...}, **resources}
    description: str = ""
    population: str = "off"  # auto: cells that can train as one population do (harness/sweeps/population.py)
    source: Path | None = None  # the spec file, when read from one
    stage_dir: str | None = None  # where `harness stage` put the inputs its jobs read offline (None: not staged)
    raw: dict = field(default_factory=dict)

    @property
    def axis_paths(self) -> list[str]:
        return [p for a in self.axes for p in a.paths]


def load_spec(source: str | Path | Mapping) -> SweepSpec:
    """Read (from a path or a dict) and validate a sweep spec."""
    path = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        data = read_yaml_mapping(path, SpecError, "a sweep spec", f"keys {', '.join(TOP_KEYS)}")
    try:
        return _parse(data, path)
    except SpecError as e:
        raise SpecError(f"{path}: {e}" if path else str(e)) from None


def _parse(data: dict, path: Path | None) -> SweepSpec:
    for key in data:
        if key not in TOP_KEYS:
            raise SpecError(f"{key}: {did_you_mean(str(key), TOP_KEYS, 'top-level key')}")
    name = data.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecError(f"name: required, letters/digits/._- (it names the runs directory), got {name!r}")
    base = _base(data.get("base"), path)
    axes: list[Axis] = []
    if "grid" in data:
        axes += _grid(data["grid"])
    if "zip" in data:
        axes += _zip(data["zip"])
    if "seeds" in data:
        axes.append(_seeds(data["seeds"]))
    if not axes:
        raise SpecError("the sweep has no axes: give `grid`, `zip` or `seeds`")
    _check_overlaps(axes)
    spec = SweepSpec(
        name=name,
        base=base,
        axes=axes,
        description=str(data.get("description") or ""),
        population=_population(data.get("population", "off")),
        source=path,
        stage_dir=_stage_dir(data.get("stage_dir")),
        raw=data,
    )
    spec.exclude = _exclude(data.get("exclude", []), spec)
    spec.resources_default, spec.resource_groups = _resources(data.get("resources", {}), spec)
    return spec


def _population(value: Any) -> str:
    if value is False:  # YAML reads a bare `off` as false
        return "off"
    if value not in POPULATION_MODES:
        raise SpecError(
            f"population: {value!r} is not allowed. Allowed: auto (cells that differ only in seed and method train "
            f"as one population job) or off (one job per cell, the default)"
        )
    return value


def _stage_dir(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise SpecError(f"stage_dir: expected a folder path (where `harness stage` put the sweep's inputs), got {value!r}")


def _base(value: Any, spec_path: Path | None) -> dict:
    if value is None:
        raise SpecError("base: required, the run config every cell starts from (a mapping or a YAML path)")
    if isinstance(value, str):
        p = Path(value)
        if not p.is_absolute() and spec_path is not None:
            p = spec_path.parent / p
        if not p.exists():
            raise SpecError(f"base: run config file not found: {p}")
        from harness.run.config import EMPTY_HINT

        value = read_yaml_mapping(
            p, SpecError, "a run config", "sections backend, seed, method, model, task, train", empty=EMPTY_HINT
        )
    if not isinstance(value, Mapping):
        raise SpecError(
            f"base: expected a run-config mapping (backend, seed, method, model, task, train, eval), got {value!r}"
        )
    return dict(value)


def _check_path(p: Any, where: str) -> str:
    try:
        paths.split(p)
    except ValueError as e:
        raise SpecError(f"{where}: {e}") from None
    return p


def _values(v: Any, where: str) -> list:
    if not isinstance(v, list):
        raise SpecError(f"{where}: expected a list of values, got {v!r}")
    if not v:
        raise SpecError(f"{where}: empty list; give at least one value (or drop the axis)")
    return v


def _grid(grid: Any) -> list[Axis]:
    if not isinstance(grid, Mapping):
        raise SpecError(f"grid: expected a mapping of <dotted key path>: [values], got {grid!r}")
    if not grid:
        raise SpecError(
            "grid: empty; give at least one <dotted key path>: [values] (e.g. method: [{name: grpo}]) or drop `grid`"
        )
    axes = []
    for p, v in grid.items():
        where = f"grid.{p}"
        _check_path(p, "grid")
        if p == "seed":
            raise SpecError("grid.seed: use the top-level `seeds: [...]` for seeds")
        axes.append(Axis(where, [p], [[x] for x in _values(v, where)]))
    return axes


def _zip(entries: Any) -> list[Axis]:
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"zip: expected a non-empty list of {{<path>: [values], <path>: [values]}}, got {entries!r}")
    axes = []
    for i, entry in enumerate(entries):
        where = f"zip[{i}]"
        if not isinstance(entry, Mapping) or not entry:
            raise SpecError(
                f"{where}: expected a mapping of <dotted key path>: [values] (axes moving together), got {entry!r}"
            )
        cols = {_check_path(p, where): _values(v, f"{where}.{p}") for p, v in entry.items()}
        lengths = {p: len(v) for p, v in cols.items()}
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{p} has {n}" for p, n in lengths.items())
            raise SpecError(f"{where}: axes moving together need equal lengths, but {detail} values")
        if "seed" in cols:
            raise SpecError(f"{where}.seed: use the top-level `seeds: [...]` for seeds")
        n = next(iter(lengths.values()))
        axes.append(Axis(where, list(cols), [[cols[p][j] for p in cols] for j in range(n)]))
    return axes


def _seeds(seeds: Any) -> Axis:
    seeds = _values(seeds, "seeds")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise SpecError(f"seeds: expected non-negative integers, got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"seeds: duplicate seeds in {seeds}")
    return Axis("seeds", ["seed"], [[s] for s in seeds])


def _check_overlaps(axes: list[Axis]) -> None:
    seen: list[tuple[str, str]] = []
    for axis in axes:
        for p in axis.paths:
            for other, where in seen:
                if paths.overlaps(p, other):
                    raise SpecError(
                        f"{axis.where}: path {p!r} overlaps {other!r} of {where}; an axis may not set a key "
                        f"another axis sets (use a mapping value for the whole subtree instead)"
                    )
            seen.append((p, axis.where))


def _known_path(p: str, spec: SweepSpec) -> bool:
    """A path may be matched on when an axis sets it (or a parent of it), or base has it."""
    return any(p == a or p.startswith(a + ".") or a.startswith(p + ".") for a in spec.axis_paths) or paths.has_path(
        spec.base, p
    )


def _where_clause(clause: Any, where: str, spec: SweepSpec) -> dict:
    if not isinstance(clause, Mapping) or not clause:
        raise SpecError(f"{where}: expected a mapping of <dotted key path>: value, got {clause!r}")
    for p in clause:
        _check_path(p, where)
        if not _known_path(p, spec):
            raise SpecError(f"{where}.{p}: not a sweep axis and not a key of base. Axes: {', '.join(spec.axis_paths)}")
    return dict(clause)


def _exclude(value: Any, spec: SweepSpec) -> list[dict]:
    if not isinstance(value, list):
        raise SpecError(f"exclude: expected a list of {{<path>: value}} filters, got {value!r}")
    return [_where_clause(c, f"exclude[{i}]", spec) for i, c in enumerate(value)]


def _resources(value: Any, spec: SweepSpec) -> tuple[dict, list[dict]]:
    if not isinstance(value, Mapping):
        raise SpecError(f"resources: expected a mapping with {', '.join(RESOURCE_SECTION_KEYS)}, got {value!r}")
    for key in value:
        if key not in RESOURCE_SECTION_KEYS:
            raise SpecError(f"resources.{key}: {did_you_mean(str(key), RESOURCE_SECTION_KEYS, 'resources key')}")
    try:
        default = check_resources(value.get("default") or {}, "resources.default")
        groups_raw = value.get("groups") or []
        if not isinstance(groups_raw, list):
            raise SpecError(
                f"resources.groups: expected a list of {{match: {{<path>: value}}, <resource keys>}}, got "
                f"{groups_raw!r}"
            )
        groups = []
        for i, g in enumerate(groups_raw):
            where = f"resources.groups[{i}]"
            res = check_resources(g, where, extra_keys=("match",))
            if "match" not in g:
                raise SpecError(
                    f"{where}.match: required, the {{<path>: value}} a cell must match to get these resources"
                )
            res["match"] = _where_clause(g["match"], f"{where}.match", spec)
            groups.append(res)
    except SpecError:
        raise
    except ValueError as e:
        raise SpecError(str(e)) from None
    return default, groups
