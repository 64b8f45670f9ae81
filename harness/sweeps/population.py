"""Population jobs of a sweep (``population: auto`` in the spec; docs/sweeps.md).

With ``auto``, cells that may train together (same backend with population training, same resources, configs
equal but for the backend's ``population_member_keys``: ``Backend.population_apart``) are split into population jobs;
each job trains its cells in one process (``run_population``) and writes every cell's own run directory, and
every member cell's jobs.jsonl names the job, so ``harness status`` and ``--only failed`` work per cell. Cells
that cannot join one run alone as before, and ``plan_units`` says why. How cells are split into jobs never changes
a number: a member's results do not depend on the other members (harness/backends/pocket/stacked.py). Every
cell of an ``auto`` sweep that can train as a population does, even alone, so a resubmitted cell continues its
checkpoint in the same mode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAX_MEMBERS = 32  # cells per population job


@dataclass
class Unit:
    """One job: a single cell (``population`` False) or a population of cells."""

    cells: list
    population: bool

    @property
    def cost(self) -> float:
        return sum(cell_cost(c) for c in self.cells)


def _backend_and_config(cell):
    from harness.backends import get_backend
    from harness.run.config import load_config

    cfg = load_config(cell.config)
    return get_backend(cfg.backend), cfg


def cell_cost(cell) -> float:
    """A rough relative training cost of a cell, for splitting and ordering (the backend's ``relative_cost``)."""
    backend, cfg = _backend_and_config(cell)
    return backend.relative_cost(cfg)


def unit_resources(unit: Unit, resources: dict) -> dict:
    """A population job's resources: the cells' own, with the time limit of its cells one after another."""
    if not unit.population or "timeout_min" not in resources:
        return resources
    return {**resources, "timeout_min": int(resources["timeout_min"]) * len(unit.cells)}


def _eligible(cell) -> str | None:
    """Why the cell cannot train in a population (None when it can)."""
    backend, cfg = _backend_and_config(cell)
    return backend.population_apart([cfg])


def _key(cell) -> str:
    """Cells with equal keys may share a population: resources and the config but for the member keys."""
    backend, _ = _backend_and_config(cell)
    shared = {k: v for k, v in cell.config.items() if k not in backend.population_member_keys}
    return json.dumps({"config": shared, "resources": cell.resources}, sort_keys=True, default=str)


def plan_units(cells: list, mode: str, parallel: int | None = None) -> tuple[list[Unit], list[str]]:
    """Jobs for ``cells`` and notes saying why cells train apart. ``parallel`` (local executor: jobs at once):
    populations are split until there are twice as many jobs as slots, so the slots stay busy; longest first."""
    if mode != "auto":
        return [Unit([c], False) for c in cells], []
    groups: dict[str, list] = {}
    alone, notes = [], []
    for c in cells:
        reason = _eligible(c)
        if reason:
            alone.append(Unit([c], False))
            notes.append(f"cell {c.alias} runs alone: {reason}")
        else:
            groups.setdefault(_key(c), []).append(c)
    units = []
    for members in groups.values():
        n = -(-len(members) // MAX_MEMBERS)
        units += [Unit(members[i::n], True) for i in range(n)]
    if len(groups) > 1:
        notes += _apart_notes(list(groups.values()))
    if parallel:
        while len(units) < 2 * parallel and any(len(u.cells) > 1 for u in units):
            big = max((u for u in units if len(u.cells) > 1), key=lambda u: u.cost)
            units.remove(big)
            units += [Unit(big.cells[0::2], True), Unit(big.cells[1::2], True)]
    units.sort(key=lambda u: -u.cost)
    return units + alone, notes


def _apart_notes(groups: list[list]) -> list[str]:
    """Why each population differs from the first (the refusal to merge them)."""
    backend, first = _backend_and_config(groups[0][0])
    out = []
    for g in groups[1:]:
        reason = backend.population_apart([first, _backend_and_config(g[0])[1]])
        if reason is None and g[0].resources != groups[0][0].resources:
            reason = "cells differ in resources"
        out.append(f"{len(g)} cell(s) like {g[0].alias} train apart from {groups[0][0].alias}'s: {reason}")
    return out


def describe(units: list[Unit]) -> str:
    pops = [u for u in units if u.population]
    alone = len(units) - len(pops)
    sizes = ", ".join(str(len(u.cells)) for u in pops)
    return f"{len(pops)} population job(s) of {sizes} cells" + (f" and {alone} single-cell job(s)" if alone else "")


# ---------------------------------------------------------------------------------------------- the job
def train_population_cells(cell_dirs: list[str]) -> dict:
    """Train the cells of ``cell_dirs`` as one population; a cell that failed or was refused gets its
    job_error.json (and, when training started, its failed result.json) like a separate job's."""
    from harness.backends import get_backend
    from harness.io import signals_interrupt
    from harness.run.config import load_config
    from harness.sweeps.job import _write_job_error

    dirs = [Path(d) for d in cell_dirs]
    configs = [load_config(d / "config.yaml") for d in dirs]
    try:
        with signals_interrupt():
            results = get_backend(configs[0].backend).train_population(configs, dirs)
    except KeyboardInterrupt:  # stopped by its sweep: every member checkpointed, resumes on resubmit
        return {"status": "interrupted"}
    out = {}
    for d, r in zip(dirs, results):
        if isinstance(r, BaseException):
            _write_job_error(d, r)
            out[d.name] = {"status": "failed", "error": f"{type(r).__name__}: {r}"}
        else:
            out[d.name] = {k: (r or {}).get(k) for k in ("run_id", "status", "wall_time_s")}
    return out
