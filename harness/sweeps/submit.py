"""Submit cells through submitit: one job array per group of identical resources.

    slurm   one ``sbatch --array`` per resource group (``map_array``); returns at once unless ``wait``
    local   subprocesses on this machine, at most ``array_parallelism`` (default CPUs // cpus_per_task)
            cells at once; always runs to the end (the throttle needs this process)
    debug   in this process, one cell after another (breakpoints work)

A group that the scheduler refuses (sbatch error) marks its cells failed with the scheduler's message in
``submit_error.json`` and the other groups are still submitted. With ``population="auto"`` the cells of a group
that can train together go as population jobs (harness/sweeps/population.py): one job trains several cells, and
each member cell records that job.
"""

from __future__ import annotations

import os
import sys
import time
import types
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import submitit
from tqdm import tqdm

from harness.sweeps import cells as C
from harness.sweeps.expand import Cell
from harness.sweeps.job import DEFAULT_TARGET, CellJob
from harness.sweeps.resources import (
    check_executor,
    check_fits_executor,
    executor_kwargs,
    executor_parameters,
    group_by_resources,
    local_parallelism,
)
from harness.sweeps.status import STATES, counts, statuses


@dataclass
class SubmitReport:
    submitted: list[str] = field(default_factory=list)  # cell ids handed to the scheduler
    refused: dict[str, str] = field(default_factory=dict)  # cell id -> the scheduler's message
    job_ids: dict[str, str] = field(default_factory=dict)  # cell id -> job id of this submission

    def went_out(self, cell, cell_dir, job_id: str, executor: str, folder: Path, group: str) -> None:
        """``cell`` was submitted as job ``job_id``: recorded in its directory (jobs.jsonl) and here."""
        C.record_job(Path(cell_dir), job_id, executor, folder / "%j", group)
        self.submitted.append(cell.id)
        self.job_ids[cell.id] = job_id

    def refusal(self, cell, cell_dir, message: str) -> None:
        """The scheduler refused ``cell``: recorded in its directory (submit_error.json, status failed) and here."""
        C.record_submit_error(Path(cell_dir), message, "slurm")
        self.refused[cell.id] = message


def make_executor(executor: str, folder: Path, resources: dict, name: str) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=executor, **executor_kwargs(resources, executor))
    ex.update_parameters(**executor_parameters(resources, executor, name))
    return ex


def submit_cells(
    cells: list[Cell],
    runs_dir: Path,
    executor: str = "local",
    *,
    sweep: str = "sweep",
    target: str = DEFAULT_TARGET,
    progress: bool = True,
    log: Callable[[str], None] = print,
    population: str = "off",
) -> SubmitReport:
    """Submit ``cells`` (already materialised under ``runs_dir``) and record job ids in their directories."""
    check_executor(executor)
    runs_dir = Path(runs_dir)
    for c in cells:
        check_fits_executor(c.resources, executor, f"cell {c.alias}")
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]  # fresh folder: job ids can repeat
    report = SubmitReport()
    groups = group_by_resources(cells)
    bar = _bar(len(cells), f"{sweep} [{executor}]", progress) if executor != "slurm" else None
    for k, (resources, group) in enumerate(groups):
        gname = f"g{k}"
        folder = runs_dir / C.SUBMITIT_DIR / f"{stamp}-{gname}"
        dirs = [C.cell_dir(runs_dir, c) for c in group]
        for d in dirs:
            C.clear_errors(d)
        try:
            ex = make_executor(executor, folder, resources, name=f"{sweep}-{gname}")
        except (ValueError, NameError, AssertionError) as e:
            raise ValueError(f"resources of {group[0].alias}: submitit rejected them: {e}") from None
        parallel = local_parallelism(resources) if executor == "local" else None
        units = _units(group, population, parallel, runs_dir, log)
        if executor == "slurm":
            if all(len(u.cells) == 1 and not u.population for u in units):
                _submit_array(ex, group, dirs, target, folder, gname, report, log)
            else:
                _submit_units(ex, units, runs_dir, folder, gname, report, log)
        elif executor == "local":
            _run_local(ex, units, runs_dir, target, folder, gname, report, parallel, bar)
        else:
            _run_debug(ex, units, runs_dir, target, folder, gname, report, bar)
    if bar is not None:
        bar.close()
    return report


def _units(group, population, parallel, runs_dir, log):
    """The jobs of a resource group: one per cell, or population jobs (``population: auto``)."""
    from harness.sweeps.population import describe, plan_units

    units, notes = plan_units(group, population, parallel)
    if population == "auto":
        log(f"population: auto: {len(group)} cells as {describe(units)}")
        for note in notes:
            log(f"  {note}")
    return units


def _submit_units(ex, units, runs_dir, folder, gname, report, log) -> None:
    """SLURM: one array task per unit (a population or a cell alone)."""
    from harness.sweeps.job import PopulationJob

    args = [[str(C.cell_dir(runs_dir, c)) for c in u.cells] for u in units]
    try:
        jobs = []
        for u, a in zip(units, args):
            _population_limits(ex, u)
            jobs.append(ex.submit(PopulationJob(u.population), a))
    except Exception as e:  # noqa: BLE001 - sbatch's refusal: show it, mark the cells, go on
        message = str(e).strip() or type(e).__name__
        for u, a in zip(units, args):
            for c, d in zip(u.cells, a):
                report.refusal(c, d, message)
        log(f"sbatch refused group {gname}: {message}")
        return
    for u, a, job in zip(units, args, jobs):
        for c, d in zip(u.cells, a):
            report.went_out(c, d, job.job_id, "slurm", folder, gname)
    log(f"submitted group {gname}: {sum(len(u.cells) for u in units)} cells as {len(jobs)} jobs")


def _submit_array(ex, group, dirs, target, folder, gname, report, log) -> None:
    try:
        jobs = ex.map_array(CellJob(target), [str(d) for d in dirs])
    except Exception as e:  # noqa: BLE001 - sbatch's refusal: show it, mark the cells, go on
        message = str(e).strip() or type(e).__name__
        for c, d in zip(group, dirs):
            report.refusal(c, d, message)
        log(f"sbatch refused group {gname} ({len(group)} cells, e.g. {group[0].alias}): {message}")
        return
    for c, d, job in zip(group, dirs, jobs):
        report.went_out(c, d, job.job_id, "slurm", folder, gname)
    log(f"submitted group {gname}: {len(group)} cells as array job {jobs[0].job_id.split('_')[0]}")


INTERRUPTED_FILE = "interrupted.json"  # a cell stopped by Ctrl-C of its local sweep: pending, resumes on resubmit


@contextmanager
def _own_session():
    """Local job controllers start in their own session: a terminal Ctrl-C reaches only the sweep, which stops
    the cells itself (otherwise every controller prints its KeyboardInterrupt traceback into the terminal)."""
    import functools
    import subprocess

    import submitit.local.local as local_mod

    original = local_mod.subprocess.Popen
    local_mod.subprocess = types.SimpleNamespace(
        **{**vars(subprocess), "Popen": functools.partial(original, start_new_session=True)}
    )
    try:
        yield
    finally:
        local_mod.subprocess = subprocess


def _submit_unit(ex, unit, runs_dir, target):
    """Submit one unit; returns (job, its cell directories)."""
    from harness.sweeps.job import PopulationJob

    dirs = [C.cell_dir(runs_dir, c) for c in unit.cells]
    if unit.population:
        _population_limits(ex, unit)
        return ex.submit(PopulationJob(True), [str(d) for d in dirs]), dirs
    _population_limits(ex, unit)
    return ex.submit(CellJob(target), str(dirs[0])), dirs


def _population_limits(ex, unit) -> None:
    """The time limit of the unit's job: its cells' (timeout_min) times the cells it trains."""
    from harness.sweeps.population import unit_resources

    res = unit.cells[0].resources
    if "timeout_min" in res:
        ex.update_parameters(timeout_min=unit_resources(unit, res)["timeout_min"])


def _run_local(ex, units, runs_dir, target, folder, gname, report, parallel, bar) -> None:
    queue = list(units)
    running: list = []
    try:
        while queue or running:
            while queue and len(running) < parallel:
                unit = queue.pop(0)
                with _own_session():
                    job, dirs = _submit_unit(ex, unit, runs_dir, target)
                for c, d in zip(unit.cells, dirs):
                    report.went_out(c, d, job.job_id, "local", folder, gname)
                running.append((job, dirs))
            time.sleep(0.2)
            finished = [(j, d) for j, d in running if j.done()]
            running = [r for r in running if r not in finished]
            if bar is not None and finished:
                bar.update(sum(len(d) for _, d in finished))
    except KeyboardInterrupt:  # stop the cells of this machine too; a rerun resumes them from their checkpoints
        _stop_local(running)
        raise


def _stop_local(running: list, grace_s: float = 60.0) -> None:
    """SIGTERM each running cell (the trainer checkpoints at the end of its step and exits quietly), mark it
    interrupted, and wait up to ``grace_s``; a second Ctrl-C kills them at once."""
    import signal

    from harness.io import atomic_write_json

    for job, dirs in running:
        for d in dirs:
            atomic_write_json(Path(d) / INTERRUPTED_FILE, {"time": time.time(), "job_id": job.job_id})
        proc = getattr(job, "_process", None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the controller forwards it to the trainer
    print(
        f"stopping {len(running)} running cells at their next step (checkpointed; Ctrl-C again to kill)",
        file=sys.stderr,
    )
    try:
        t0 = time.time()
        while time.time() - t0 < grace_s and not all(job.done() for job, _ in running):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    for job, _ in running:
        if not job.done():
            job.cancel(check=False)


def _run_debug(ex, units, runs_dir, target, folder, gname, report, bar) -> None:
    for unit in units:
        job, dirs = _submit_unit(ex, unit, runs_dir, target)
        for c, d in zip(unit.cells, dirs):
            report.went_out(c, d, job.job_id, "debug", folder, gname)
        try:
            job.result()
        except Exception:  # noqa: BLE001 - the job wrote job_error.json; status reports it
            pass
        if bar is not None:
            bar.update(len(dirs))


def wait_for(
    dirs: list[Path], poll_s: float = 2.0, progress: bool = True, desc: str = "sweep", timeout_s: float | None = None
) -> list:
    """Follow cells until none is queued or running; a progress bar counts finished cells."""
    start = time.time()
    bar = _bar(len(dirs), desc, progress)
    try:
        while True:
            rows = statuses(dirs)
            c = counts(rows)
            bar.n = c["done"] + c["failed"]
            bar.set_postfix({s: c[s] for s in STATES if c[s]}, refresh=True)
            if not any(r.state in ("pending", "running") and r.job_id for r in rows):
                return rows
            if timeout_s is not None and time.time() - start > timeout_s:
                return rows
            time.sleep(poll_s)
    finally:
        bar.close()


def _bar(total: int, desc: str, enabled: bool):
    return tqdm(
        total=total,
        desc=desc,
        unit="cell",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        leave=True,
        mininterval=0.5 if os.isatty(2) else 5,
    )
