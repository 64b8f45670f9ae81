"""What runs inside a sweep job: ``CellJob(cell_dir)`` trains one cell and can be requeued by submitit.

The job calls ``harness.run.runner.run(load_config(cell_dir/"config.yaml"), cell_dir)``; the runner resumes from
``cell_dir/checkpoints`` when present. On time-out or preemption SLURM sends USR2: for a backend that saves on
request the run first checkpoints at its next step boundary (harness/sweeps/preemption.py), then submitit calls
``CellJob.checkpoint``, which resubmits the same cell, and requeues the job: the next attempt continues from that
checkpoint. When the target raises on the head task (task 0), the traceback goes to ``cell_dir/job_error.json``
(for ``harness status``) before the exception reaches submitit; another task's error stays in its own log and
result pickle (a worker fails when its head does: the head's error is the cell's).
"""

from __future__ import annotations

import importlib
import os
import socket
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import submitit

from harness.io import atomic_write_json, signals_interrupt

DEFAULT_TARGET = "harness.sweeps.job:train_cell"


def train_cell(cell_dir: str | Path) -> dict:
    """Train the cell's run config through the runner (writes the run directory; result.json last)."""
    from harness.backends import IDLE, WORKER, get_backend
    from harness.run.config import load_config
    from harness.run.runner import run
    from harness.sweeps.preemption import deferred_requeue

    cell_dir = Path(cell_dir)
    config = load_config(cell_dir / "config.yaml")
    backend = get_backend(config.backend)
    role = backend.worker_role(config)
    # the run directory (config.yaml, resume, result.json) belongs to the head task alone, so no task races on it
    if role == WORKER:  # lends its node to the head (OpenRLHF: joins its Ray cluster)
        backend.train(config, cell_dir)
        return {"status": "worker"}
    if role == IDLE:  # a task of a multi-node job the backend has no use for
        return {"status": "idle"}
    defer = deferred_requeue(cell_dir) if "checkpoint_on_request" in backend.capabilities else nullcontext()
    try:
        # submitit's job process ignores SIGTERM: a sweep's stop would wait for the run; SLURM's USR2 -> checkpoint
        with signals_interrupt(), defer:
            result = run(config, cell_dir)
    except KeyboardInterrupt:  # stopped by its sweep (SIGTERM/Ctrl-C): checkpointed, resumes on resubmit; no traceback
        return {"status": "interrupted"}
    if isinstance(result, dict):
        return {k: result.get(k) for k in ("run_id", "status", "wall_time_s") if k in result}
    return {"status": "completed"}


def resolve_target(target: str):
    """``"package.module:function"`` -> the function (kept as a string so the pickle stays small and stable)."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"job target {target!r}: expected 'package.module:function'")
    return getattr(importlib.import_module(module), name)


class CellJob(submitit.helpers.Checkpointable):
    """A picklable, requeueable job: ``CellJob(target)(cell_dir)`` runs ``target(cell_dir)``."""

    def __init__(self, target: str = DEFAULT_TARGET):
        self.target = target

    def __call__(self, cell_dir: str) -> Any:
        try:
            return resolve_target(self.target)(cell_dir)
        except Exception as e:  # noqa: BLE001 - recorded, then re-raised; SystemExit is submitit's requeue
            if task_rank() == 0:  # the head's error is the cell's; a worker's must not overwrite it
                _write_job_error(Path(cell_dir), e)
            raise

    def checkpoint(self, cell_dir: str) -> submitit.helpers.DelayedSubmission:
        """Requeue the same cell; the run itself resumes from its last checkpoint."""
        return submitit.helpers.DelayedSubmission(CellJob(self.target), cell_dir)


def task_rank() -> int:
    """This task's rank in a (multi-node) job: 0 on the head, and outside SLURM."""
    return int(os.environ.get("SLURM_PROCID", "0") or 0)


def _write_job_error(cell_dir: Path, exc: BaseException) -> None:
    try:
        job_id = submitit.JobEnvironment().job_id
    except RuntimeError:
        job_id = None
    try:
        atomic_write_json(
            cell_dir / "job_error.json",
            {
                "job_id": job_id,
                "attempt": int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),  # a requeued job's later starts
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "time": time.time(),
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exception(type(exc), exc, exc.__traceback__)[-12:],
            },
        )
    except (OSError, ValueError):  # e.g. a full disk: the job's own error still reaches submitit
        pass


class PopulationJob(submitit.helpers.Checkpointable):
    """A picklable, requeueable job over a list of cell directories: a population (``target``, default
    ``harness.sweeps.population:train_population_cells``), or one cell alone (``train_cell``)."""

    def __init__(self, population: bool = True, target: str = "harness.sweeps.population:train_population_cells"):
        self.population, self.target = population, target

    def __call__(self, cell_dirs: list[str]) -> Any:
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
