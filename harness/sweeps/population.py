"""Population jobs of a sweep (``population: auto`` in the spec; docs/sweeps.md).

With ``auto``, cells that may train together (same backend with population training, same resources, configs
equal but for seed and method: ``harness.backends.pocket.population.why_apart``) are split into population jobs;
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
from typing import Any

import submitit

MAX_MEMBERS = 32  # cells per population job


@dataclass
class Unit:
    """One job: a single cell (``population`` False) or a population of cells."""

    cells: list
    population: bool

    @property
    def cost(self) -> float:
        return sum(cell_cost(c) for c in self.cells)


def cell_cost(cell) -> float:
    """A rough relative training cost of a cell, for splitting and ordering: sqrt(parameters) x responses x
    steps (at pocket sizes a step's CPU time grows about as the square root of the parameter count: 0.156 s at
    pocket-0.3m, 0.286 s at pocket-1m, docs/pocket.md)."""
    cfg = cell.config
    size = (cfg.get("model") or {}).get("name", "")
    from harness.backends.pocket.models import SIZES

    s = SIZES.get(size)
    params = (s.layers * (4 * s.hidden**2 + 3 * s.hidden * s.intermediate)) if s else 1e6
    t = cfg.get("train") or {}
    return params**0.5 * t.get("steps", 1) * t.get("prompts_per_step", 1) * t.get("samples_per_prompt", 1)


def unit_resources(unit: Unit, resources: dict) -> dict:
    """A population job's resources: the cells' own, with the time limit of its cells one after another."""
    if not unit.population or "timeout_min" not in resources:
        return resources
    return {**resources, "timeout_min": int(resources["timeout_min"]) * len(unit.cells)}


def _eligible(cell) -> str | None:
    """Why the cell cannot train in a population (None when it can)."""
    from harness.backends.pocket.population import why_apart
    from harness.config import load_config

    return why_apart([load_config(cell.config)])


def _key(cell) -> str:
    """Cells with equal keys may share a population: resources and the config but for seed and method."""
    from harness.backends.pocket.population import MEMBER_KEYS

    shared = {k: v for k, v in cell.config.items() if k not in MEMBER_KEYS}
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
    from harness.backends.pocket.population import why_apart
    from harness.config import load_config

    first = load_config(groups[0][0].config)
    out = []
    for g in groups[1:]:
        reason = why_apart([first, load_config(g[0].config)])
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
POPULATION_TARGET = "harness.sweeps.population:train_population_cells"


def train_population_cells(cell_dirs: list[str]) -> dict:
    """Train the cells of ``cell_dirs`` as one population; a cell that failed or was refused gets its
    job_error.json (and, when training started, its failed result.json) like a separate job's."""
    from harness.backends.pocket.population_runner import run_population
    from harness.config import load_config
    from harness.io import signals_interrupt
    from harness.sweeps.job import _write_job_error

    dirs = [Path(d) for d in cell_dirs]
    configs = [load_config(d / "config.yaml") for d in dirs]
    try:
        with signals_interrupt():
            results = run_population(configs, dirs)
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


class PopulationJob(submitit.helpers.Checkpointable):
    """A picklable, requeueable job over a list of cell directories: a population, or one cell alone
    (``harness.sweeps.job.train_cell``)."""

    def __init__(self, population: bool = True, target: str = POPULATION_TARGET):
        self.population, self.target = population, target

    def __call__(self, cell_dirs: list[str]) -> Any:
        from harness.sweeps.job import CellJob, _write_job_error, resolve_target

        if not self.population:
            return CellJob()(cell_dirs[0])
        try:
            return resolve_target(self.target)(cell_dirs)
        except Exception as e:  # noqa: BLE001 - recorded in every member, then re-raised for submitit
            for d in cell_dirs:
                _write_job_error(Path(d), e)
            raise

    def checkpoint(self, cell_dirs: list[str]) -> submitit.helpers.DelayedSubmission:
        """Requeue the same cells; each resumes from its last checkpoint."""
        return submitit.helpers.DelayedSubmission(PopulationJob(self.population, self.target), cell_dirs)
