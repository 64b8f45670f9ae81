"""SLURM's warning signal in a sweep job (harness/sweeps/preemption.py): the run saves first, then submitit requeues.

Each case runs a real process that installs a stand-in for submitit's USR2 handler (it records the call and exits
-1 as submitit's requeue does), enters ``deferred_requeue`` and runs a step loop that honours checkpoint requests as
a trainer does (harness/run/preempt.py); the test sends it real signals. The real thing on a real cluster:
tests/slurm (pocket) and tests/multinode (OpenRLHF over two nodes)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run import preempt

CHILD = r"""
import os, signal, sys, time
from pathlib import Path
from harness.run import preempt
from harness.sweeps import preemption

run_dir, mode = Path(sys.argv[1]), sys.argv[2]
calls = []

def submitit_requeue(signum, frame):  # what submitit's handler does last: requeue, then SystemExit(-1)
    calls.append(signum)
    (run_dir / "requeued").write_text(str(len(calls)))
    raise SystemExit(-1)

signal.signal(signal.SIGUSR2, submitit_requeue)
if mode == "stuck":
    preemption.DEFAULT_FALLBACK_S = 1.0
with preemption.deferred_requeue(run_dir):
    (run_dir / "token").write_text(os.environ.get(preempt.TOKEN_ENV, ""))
    for step in range(1, 400):
        time.sleep(0.02)
        (run_dir / "step").write_text(str(step))
        if mode == "honour" and preempt.requested(run_dir):  # a trainer's step boundary
            preempt.record_saved(run_dir, step)
            raise KeyboardInterrupt
        if mode == "finish" and step == 60:
            break
(run_dir / "finished").write_text("yes")
"""


def run_child(tmp_path: Path, mode: str, signals: int = 1) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / preempt.REQUEST_FILE).write_text(json.dumps({"token": "an-earlier-attempt", "saved_step": 3}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # no SLURM job: default grace time
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir), mode], env=env)
    deadline = time.time() + 60
    while not (run_dir / "step").exists():
        assert time.time() < deadline and proc.poll() is None, "the child never started its loop"
        time.sleep(0.02)
    assert not (run_dir / preempt.REQUEST_FILE).exists()  # the earlier attempt's request is gone before the run
    for _ in range(signals):  # SLURM sometimes delivers the warning twice, ~70 ms apart
        proc.send_signal(signal.SIGUSR2)
        time.sleep(0.07)
    return proc.wait(timeout=60), run_dir


def test_the_run_checkpoints_at_its_next_step_then_the_job_requeues_once(tmp_path):
    rc, run_dir = run_child(tmp_path, "honour", signals=2)
    assert rc == 255  # submitit's SystemExit(-1): requeued
    assert (run_dir / "requeued").read_text() == "1"  # once, although USR2 came twice
    request = json.loads((run_dir / preempt.REQUEST_FILE).read_text())
    assert request["token"] == (run_dir / "token").read_text() != ""
    assert request["saved_step"] == int((run_dir / "step").read_text())  # the step the loop stopped after
    assert not (run_dir / "finished").exists()


def test_a_run_that_finishes_first_is_not_requeued(tmp_path):
    rc, run_dir = run_child(tmp_path, "finish")
    assert rc == 0 and (run_dir / "finished").exists()
    assert not (run_dir / "requeued").exists() and not (run_dir / preempt.REQUEST_FILE).exists()


def test_a_trainer_that_never_stops_is_requeued_after_the_grace_time(tmp_path):
    t0 = time.time()
    rc, run_dir = run_child(tmp_path, "stuck")
    assert rc == 255 and (run_dir / "requeued").read_text() == "1"
    assert int((run_dir / "step").read_text()) < 399 and time.time() - t0 < 30


def test_no_request_is_seen_outside_a_job(tmp_path, monkeypatch):
    """A run without the job's token (``harness train`` by hand) never stops on a request file."""
    monkeypatch.delenv(preempt.TOKEN_ENV, raising=False)
    preempt.request(tmp_path, "SIGUSR2", token="t1")
    assert preempt.requested(tmp_path) is None
    monkeypatch.setenv(preempt.TOKEN_ENV, "t2")  # another attempt's token
    assert preempt.requested(tmp_path) is None
    monkeypatch.setenv(preempt.TOKEN_ENV, "t1")
    assert preempt.requested(tmp_path)["reason"] == "SIGUSR2"
    preempt.record_saved(tmp_path, 7)
    assert preempt.saved_step(tmp_path) == 7


@pytest.mark.parametrize(
    "text, seconds",
    [("14:59", 899.0), ("1:02:03", 3723.0), ("2-00:00:01", 172801.0), ("UNLIMITED", None), ("INVALID", None)],
)
def test_slurm_time_left_is_parsed(text, seconds):
    from harness.sweeps.preemption import parse_duration

    assert parse_duration(text) == seconds
