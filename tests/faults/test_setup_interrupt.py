"""Issue 29 item 1: Ctrl-C of a local sweep while its cell is still setting up (here: in its warm start). submitit's
job process ignores SIGTERM, so the stop was swallowed until the training loop installed its handler, and the cell
ran on to the end. Now the cell stops at once, shows as interrupted, and the resubmission trains it from its warm
start (the resubmission path of a warm-started config)."""

import json
import os
import signal
import subprocess
import sys
import time

import yaml

from harness.run.rundir import is_locked
from harness.sweeps.status import cell_status
from tests.helpers.sweep_targets import as_in_a_terminal


def test_ctrl_c_during_a_cells_warm_start_stops_it_and_the_resubmission_finishes_it(tmp_path, fx):
    base = fx.warm_base(tmp_path, steps=3, max_steps=250, check_every=250)  # a warm start of about 7 s
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "setup", "base": base, "seeds": [0]}))
    runs = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "s.yaml",
        "--runs-dir",
        str(runs),
        "--executor",
        "local",
        "--no-progress",
    ]
    p = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=fx.ENV,
        start_new_session=True,
        preexec_fn=as_in_a_terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.time()
        while not any("run " in log.read_text() for log in runs.glob("*/train.log")):  # the runner started set-up
            assert p.poll() is None, p.communicate()
            assert time.time() - t0 < 240, "the cell never started"
            time.sleep(0.05)
        (cell,) = [d for d in runs.iterdir() if (d / "cell.json").exists()]
        assert not (cell / "metrics.jsonl").exists()  # still setting up
        sent = time.time()
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C in the terminal
        out, err = p.communicate(timeout=240)
        stopped_after = time.time() - sent
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    t0 = time.time()
    while is_locked(cell) and time.time() - t0 < 60:
        time.sleep(0.2)
    assert stopped_after < 30, f"the sweep took {stopped_after:.0f} s to stop its cell (the grace is 60 s)"
    assert not (cell / "metrics.jsonl").exists() and not (cell / "result.json").exists()  # no step trained after it
    assert not list((tmp_path / "cache").rglob("*.pt"))  # the warm start itself was stopped, not finished
    assert "interrupted during set-up" in (cell / "train.log").read_text()
    st = cell_status(cell)
    assert st.state == "pending" and "interrupted" in st.detail

    again = subprocess.run(cmd + ["--wait"], cwd=tmp_path, env=fx.ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert cell_status(cell).state == "done"
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    res = json.loads((cell / "result.json").read_text())
    assert res["status"] == "completed" and res["warm_start"]["steps"] == 250 and res["warm_start"]["cached"] is False
