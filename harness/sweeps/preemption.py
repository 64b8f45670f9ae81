"""SLURM's warning signal in a sweep job: the run saves a checkpoint first, then submitit requeues the job.

submitit's own SIGUSR2 handler (time limit or preemption ahead) requeues at once: the run resumes from its last
periodic checkpoint and trains the steps since then again. ``deferred_requeue`` (around the run, on the head task)
keeps that handler but calls it later. The first USR2 writes the run's checkpoint request (harness/run/preempt.py);
the trainer finishes its step, saves, and stops with ``KeyboardInterrupt`` out of the runner; then submitit's handler
runs (the job's resubmission pickle, ``scontrol requeue``, exit) and the next attempt resumes from that very step.
A run that finishes first is not requeued. Should the trainer not stop in time, submitit's handler runs anyway
``FALLBACK_MARGIN_S`` before the time limit (as before: the last periodic checkpoint). Only the job process gets the
signal's handling: everything a backend starts runs with SIGUSR2 ignored (``preempt.ignore_warning_signal``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from harness.run import preempt

WARNING_SIGNAL = preempt.WARNING_SIGNAL
FALLBACK_MARGIN_S = 60.0
DEFAULT_FALLBACK_S = 600.0  # when SLURM cannot say how long the job has left


def time_left_s(job_id: str | None = None) -> float | None:
    """Seconds until the SLURM job's time limit (``squeue %L``), None when unknown or unlimited."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_duration(out.stdout.strip()) if out.returncode == 0 else None


def parse_duration(text: str) -> float | None:
    """SLURM's ``[days-][hours:]minutes:seconds`` in seconds; None for UNLIMITED, NOT_SET, INVALID or garbage."""
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    try:
        parts = [int(p) for p in rest.split(":")]
        d = int(days)
    except ValueError:
        return None
    if not 1 <= len(parts) <= 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + p
    return float(d * 86400 + seconds)


class deferred_requeue:  # noqa: N801 - used as a context manager, like contextlib's
    """Around one run on a job's head task: see the module docstring. A no-op outside a submitit job (no callable
    USR2 handler) and off the main thread."""

    def __init__(self, run_dir: str | os.PathLike, log=None):
        self.run_dir = Path(run_dir)
        self.log = log or (lambda msg: print(f"harness: {msg}", file=sys.stderr, flush=True))
        self.original = None
        self.pending: tuple | None = None
        self.fallback = False
        self.timer: threading.Timer | None = None
        self.token = uuid.uuid4().hex

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        current = signal.getsignal(WARNING_SIGNAL)
        if not callable(current):
            return self
        self.original = current
        preempt.clear(self.run_dir)  # an earlier attempt's request names another token; gone before this run starts
        os.environ[preempt.TOKEN_ENV] = self.token
        signal.signal(WARNING_SIGNAL, self._handler)
        return self

    def _handler(self, signum, frame) -> None:
        if self.fallback:  # the trainer did not stop in time: submitit requeues now (raises SystemExit)
            self._restore(requeueing=True)
            self.log("no checkpoint within the grace time; requeueing now (the run resumes from its last one)")
            self.original(signum, frame)
            return
        if self.pending is not None:  # SLURM sometimes delivers the warning twice, ~70 ms apart
            return
        self.pending = (signum, frame)
        name = signal.Signals(signum).name
        preempt.request(self.run_dir, f"{name} (time limit or preemption ahead)", self.token)
        left = time_left_s()
        grace = DEFAULT_FALLBACK_S if left is None else max(left - FALLBACK_MARGIN_S, left / 2)
        self.timer = threading.Timer(grace, self._fire_fallback)
        self.timer.daemon = True
        self.timer.start()
        self.log(
            f"{name}: checkpoint requested from the trainer at its next step boundary, then the job is requeued "
            f"(requeued anyway after {grace:.0f} s)"
        )

    def _fire_fallback(self) -> None:
        self.fallback = True
        os.kill(os.getpid(), WARNING_SIGNAL)

    def _restore(self, requeueing: bool = False) -> None:
        """Submitit's handler back; while the job requeues and exits, a repeated warning is ignored (Python resets
        its handlers to the default at exit, and USR2's default action kills the process)."""
        if self.timer is not None:
            self.timer.cancel()
        if self.original is not None:
            signal.signal(WARNING_SIGNAL, signal.SIG_IGN if requeueing else self.original)
        os.environ.pop(preempt.TOKEN_ENV, None)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.original is None:
            return False
        saved = preempt.saved_step(self.run_dir)
        requeue = self.pending is not None and exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self._restore(requeueing=requeue)
        if self.pending is None:
            return False
        if exc_type is None:  # the run ended before it saw the request: nothing to resume
            preempt.clear(self.run_dir)
            self.log("the run finished before it was stopped; not requeued")
            return False
        if requeue:  # stopped at a step boundary: requeue now
            where = f"checkpoint of step {saved} written" if saved is not None else "stopped"
            self.log(f"{where} on {signal.Signals(self.pending[0]).name}; requeueing ({time.strftime('%H:%M:%S')})")
            self.original(*self.pending)  # submitit: resubmission pickle, scontrol requeue, SystemExit
        return False
