"""Ctrl-C of a local sweep (issue #16 item 11): no tracebacks in the terminal, the running cell stops at a step
boundary with its checkpoint, shows as interrupted (pending, resumable), and its stderr tail holds no progress bars."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.helpers.sweep_targets import as_in_a_terminal, tiny_pocket_base

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_of_a_local_sweep_is_quiet_and_leaves_a_resumable_cell(tmp_path):
    base = tiny_pocket_base(steps=60, checkpoint_every=1)
    base["logging"]["progress"] = True  # a progress bar in the cell's stderr must not read as its error
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "ints", "base": base, "seeds": [0]}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE": os.environ.get("HARNESS_CACHE", str(tmp_path))}
    runs = tmp_path / "runs"
    # a new session stands for the terminal: SIGINT to its process group is what Ctrl-C sends
    p = subprocess.Popen(
        [sys.executable, "-m", "harness", "sweep", "s.yaml", "--runs-dir", str(runs), "--executor", "local"],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        preexec_fn=as_in_a_terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.time()
        while not any(runs.glob("*/metrics.jsonl")) or not next(runs.glob("*/metrics.jsonl")).stat().st_size:
            assert p.poll() is None, p.communicate()
            assert time.time() - t0 < 240, "the cell never started"
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "stopping 1 running cells" in err
    (cell,) = [d for d in runs.iterdir() if (d / "cell.json").exists()]
    from harness.run.rundir import is_locked
    from harness.sweeps.status import cell_status

    t0 = time.time()
    while is_locked(cell) and time.time() - t0 < 60:  # the trainer finishes its step and releases the run
        time.sleep(0.2)
    st = cell_status(cell)
    assert st.state == "pending" and "interrupted" in st.detail
    assert not any("%|" in line for line in st.tail)
    assert (cell / "checkpoints" / "latest.pt").exists() and not (cell / "result.json").exists()
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    log = (cell / "train.log").read_text()
    assert "interrupted" in log and "checkpoint saved" in log  # stopped at a step boundary, not killed mid-step
    assert len(rows) < 60, "the cell finished before the interrupt; the resubmission below would test nothing"
    # the resubmission resumes the interrupted cell (it used to say "nothing to submit": still queued or running)
    again = subprocess.run(
        [sys.executable, "-m", "harness", "sweep", "s.yaml", "--runs-dir", str(runs), "--executor", "local", "--wait"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    assert cell_status(cell).state == "done"
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 61))  # resumed: every step once, none repeated
