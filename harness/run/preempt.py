"""A checkpoint requested from outside the trainer: the job asks, the trainer saves at its next step boundary.

SLURM warns a job before its time limit (or a preemption) with a signal; submitit's handler would requeue at once,
losing every step since the last periodic checkpoint. The sweep job (harness/sweeps/preemption.py) writes a request
instead: ``<run_dir>/checkpoint_request.json`` carrying the job attempt's token. A trainer that honours requests
(pocket in its loop; OpenRLHF in the plug-in's per-step hook, in a Ray worker) checks it once per step, finishes the
step, saves its checkpoint, records the saved step in the same file and stops; the job then requeues and the next
attempt resumes from that step. The token is ``HARNESS_PREEMPT_TOKEN`` in the environment of the job and of
everything it starts (Ray workers get every ``HARNESS_*`` variable): a run without it (``harness train`` by hand)
never sees a request, and a file left by an earlier attempt names another token.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from harness.io import atomic_write_json

REQUEST_FILE = "checkpoint_request.json"
TOKEN_ENV = "HARNESS_PREEMPT_TOKEN"
WARNING_SIGNAL = signal.SIGUSR2  # submitit's --signal=USR2@<signal_delay_s>


def ignore_warning_signal() -> None:
    """``preexec_fn`` of a process a job starts: SIGUSR2 ignored there and in everything it starts (Ray, vLLM,
    DeepSpeed keep an inherited "ignore" across exec). SLURM's ``proctrack/linuxproc`` (and newer clusters'
    ``SignalChildrenProcesses``) send the warning to every process of a task, and a process without a handler
    dies of USR2; the job process alone acts on it."""
    signal.signal(WARNING_SIGNAL, signal.SIG_IGN)


class CheckpointedOnRequest(Exception):
    """A trainer saved its checkpoint because the job asked and stops here (raised where it cannot simply return)."""


def request(run_dir: str | os.PathLike, reason: str, token: str) -> None:
    """Ask the run's trainer for a checkpoint at its next step boundary (atomic; any earlier request replaced)."""
    atomic_write_json(
        Path(run_dir) / REQUEST_FILE, {"token": token, "reason": reason, "time": time.time(), "pid": os.getpid()}
    )


def requested(run_dir: str | os.PathLike) -> dict | None:
    """This attempt's request (None when there is none, or this process runs under no job that can ask)."""
    token = os.environ.get(TOKEN_ENV)
    path = Path(run_dir) / REQUEST_FILE
    if not token or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # being replaced right now: seen at the next step
        return None
    return data if isinstance(data, dict) and data.get("token") == token else None


def record_saved(run_dir: str | os.PathLike, step: int) -> None:
    """The trainer's answer: the checkpoint of ``step`` is written (the job reads it before it requeues)."""
    data = requested(run_dir)
    if data is not None:
        atomic_write_json(Path(run_dir) / REQUEST_FILE, {**data, "saved_step": int(step), "saved_at": time.time()})


def saved_step(run_dir: str | os.PathLike) -> int | None:
    """The step whose checkpoint the trainer wrote for this attempt's request, if it did."""
    data = requested(run_dir)
    return None if data is None or data.get("saved_step") is None else int(data["saved_step"])


def clear(run_dir: str | os.PathLike) -> None:
    """Remove the request file (a new attempt starts without one)."""
    try:
        (Path(run_dir) / REQUEST_FILE).unlink()
    except FileNotFoundError:
        pass
