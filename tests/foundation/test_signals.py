"""The signal handlers of the harness are installed in one place, harness.io (signal_handlers and the three
context managers built on it): each restores the handlers it replaced and is a no-op off the main thread."""

import os
import re
import signal
import threading
from pathlib import Path

import pytest

from harness.io import signal_handlers, signals_deferred, signals_interrupt, signals_stop_flag

ROOT = Path(__file__).resolve().parents[2]


def _kill(sig):
    os.kill(os.getpid(), sig)


def test_the_old_handlers_come_back():
    mine = lambda signum, frame: None  # noqa: E731
    before = signal.getsignal(signal.SIGUSR1)
    with signal_handlers({signal.SIGUSR1: mine}) as old:
        assert signal.getsignal(signal.SIGUSR1) is mine and old == {signal.SIGUSR1: before}
    assert signal.getsignal(signal.SIGUSR1) is before


def test_interrupt_raises_at_once_with_the_signal_name():
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"), signals_interrupt():
        _kill(signal.SIGTERM)


def test_stop_flag_first_sets_the_flag_then_a_second_signal_interrupts():
    flag = {}
    with signals_stop_flag(flag):
        _kill(signal.SIGTERM)
        assert flag == {"stop": "SIGTERM"}
        with pytest.raises(KeyboardInterrupt):
            _kill(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is not None and flag == {"stop": "SIGTERM"}


def test_deferred_handlers_run_after_the_block_in_arrival_order():
    seen = []
    with signal_handlers(
        {signal.SIGUSR1: lambda s, f: seen.append("usr1"), signal.SIGUSR2: lambda s, f: seen.append("usr2")}
    ):
        with signals_deferred():
            _kill(signal.SIGUSR2)
            _kill(signal.SIGUSR1)
            assert seen == []
        assert seen == ["usr2", "usr1"]


def test_off_the_main_thread_nothing_is_installed():
    out = {}

    def worker():
        with signal_handlers({signal.SIGUSR1: lambda s, f: None}) as old, signals_stop_flag({}), signals_interrupt():
            out["old"] = old

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == {"old": {}}


# signal.signal( outside harness/io.py: a handler installer of its own. The exceptions run in child processes.
CHILD_PROCESSES = {"evals/_sandbox_runner.py", "evals/math_grader.py"}  # SIGALRM timeouts; a grading worker's SIGINT
# SLURM job processes, for their whole life (never restored, so not a context manager): the job's USR2 warning
# handler (it restores submitit's own when it requeues), USR2 ignored for the launcher and everything it execs
# (inherited), a Ray worker task's SIGTERM -> exit so that it stops its node (docs/gpu.md "The cluster rehearsal")
JOB_PROCESSES = {"harness/sweeps/preemption.py", "harness/run/preempt.py", "harness/backends/openrlhf/raycluster.py"}


def test_no_other_module_installs_signal_handlers():
    found = [
        str(p.relative_to(ROOT))
        for folder in ("harness", "evals", "methods", "baselines")
        for p in (ROOT / folder).rglob("*.py")
        if re.search(r"\bsignal\.signal\(", p.read_text())
        and str(p.relative_to(ROOT)) not in {"harness/io.py", *CHILD_PROCESSES, *JOB_PROCESSES}
    ]
    assert found == []
