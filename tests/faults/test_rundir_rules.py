"""Run-directory rules (issue #16 items 3, 4, 5, 7): runs that never update, nesting, liveness, up-front refusals."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.run.rundir import NestingError, check_placement, process_start
from tests.helpers.sweep_targets import tiny_pocket_base


def cfg_file(tmp_path, steps=2, **train):
    base = tiny_pocket_base(steps=steps, checkpoint_every=0)
    base["train"].update(train)
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


# ------------------------------------------------------------------------------------ item 4: no updates
def test_a_run_whose_groups_are_all_filtered_ends_insufficient_updates(tmp_path, capsys):
    # the untrained 0.3M model scores 0 on every arith prompt: dynamic filtering drops every group
    cfg, rd = cfg_file(tmp_path, steps=2, dynamic_filtering=True, max_gen_batches=1), tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    res = json.loads((rd / "result.json").read_text())
    assert res["status"] == "insufficient_updates" and res["updates"] == {"made": 0, "expected": 2}
    assert "only 0 of 2 steps updated" in capsys.readouterr().err
    # finished: a rerun does not train again
    stamp = (rd / "result.json").stat().st_mtime_ns
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert (rd / "result.json").stat().st_mtime_ns == stamp


def test_a_run_that_updates_is_completed_with_its_update_count(tmp_path):
    cfg, rd = cfg_file(tmp_path, steps=2), tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    res = json.loads((rd / "result.json").read_text())
    assert res["status"] == "completed" and res["updates"] == {"made": 2, "expected": 2}


def test_updates_threshold_is_half_the_expected_steps():
    from harness.run.runner import finished_status

    assert finished_status({"made": 0, "expected": 10}) == "insufficient_updates"
    assert finished_status({"made": 4, "expected": 10}) == "insufficient_updates"
    assert finished_status({"made": 5, "expected": 10}) == "completed"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["train.samples_per_prompt=1", "train.dynamic_filtering=true"], "filters every group"),
        (["train.samples_per_prompt=1", "method.advantage=prime"], "needs at least 2 responses per prompt"),
        (["eval.top_p=0"], "eval.top_p: 0.0 keeps no token; allowed: 0 < top_p <= 1"),
        (["eval.temperature=0", "eval.n_samples=4"], "eval.n_samples: 4 at eval.temperature: 0 are identical"),
    ],
)
def test_configs_that_can_never_update_or_evaluate_are_refused_in_dry_run(tmp_path, capsys, overrides, fragment):
    cfg = cfg_file(tmp_path)
    assert main(["train", str(cfg), *overrides, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and fragment in err
    assert not (tmp_path / "runs").exists()


def test_sweep_dry_run_refuses_prime_with_one_sample(tmp_path, capsys):
    spec = {
        "name": "s",
        "base": tiny_pocket_base(),
        "grid": {"method.advantage": ["grpo", "prime"], "train.samples_per_prompt": [1]},
    }
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(p), "--dry-run"]) == 2
    assert "needs at least 2 responses per prompt" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ item 3: nesting
def _sweep_dir(tmp_path) -> Path:
    runs = tmp_path / "runs"
    (runs / "a__abc").mkdir(parents=True)
    (runs / "sweep.yaml").write_text("name: s\n")
    (runs / ".submit.lock").write_text("")  # what a submission leaves (the placement marker)
    (runs / "a__abc" / "cell.json").write_text("{}")
    (runs / "a__abc" / "config.yaml").write_text("{}")
    return runs


def test_a_run_in_a_sweeps_runs_directory_is_refused_at_the_start(tmp_path, capsys):
    runs, cfg = _sweep_dir(tmp_path), cfg_file(tmp_path)
    assert main(["train", str(cfg), "--run-dir", str(runs)]) == 2
    assert "is a sweep's runs directory" in capsys.readouterr().err
    assert main(["train", str(cfg), "--run-dir", str(runs / "stray")]) == 2
    assert "inside the sweep runs directory" in capsys.readouterr().err
    assert main(["train", str(cfg), "--run-dir", str(runs / "stray"), "--dry-run"]) == 2  # refused in a dry run too
    assert "inside the sweep runs directory" in capsys.readouterr().err
    assert sorted(p.name for p in runs.iterdir()) == [".submit.lock", "a__abc", "sweep.yaml"]  # nothing written


def test_a_run_inside_a_run_or_around_runs_is_refused(tmp_path, capsys):
    cfg = cfg_file(tmp_path)
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "outer" / "rd")]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "outer" / "rd" / "inner")]) == 2
    assert "inside the run directory" in capsys.readouterr().err
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "outer")]) == 2
    assert "holds other runs" in capsys.readouterr().err


def test_a_cell_may_sit_in_its_sweep_and_sweeps_and_reports_refuse_runs(tmp_path):
    runs = _sweep_dir(tmp_path)
    check_placement(runs / "a__abc", "cell")
    with pytest.raises(NestingError, match="inside the sweep runs directory"):
        check_placement(runs / "other" / "x", "run")
    with pytest.raises(NestingError, match="inside the sweep runs directory"):
        check_placement(runs / "nested", "sweep")
    with pytest.raises(NestingError, match="is a run directory"):
        check_placement(runs / "a__abc", "report")
    (runs / "stray").mkdir()
    (runs / "stray" / "config.yaml").write_text("{}")
    (runs / "stray" / "result.json").write_text("{}")
    with pytest.raises(NestingError, match="holds a run that is not one of its cells"):
        check_placement(runs, "sweep")


def test_collection_warns_about_nested_runs_and_reads_both(tmp_path):
    from harness.results.collect import find_run_dirs

    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (outer / "result.json").write_text("{}")
    (inner / "result.json").write_text("{}")
    with pytest.warns(UserWarning, match="nested inside the run directory"):
        found = find_run_dirs([tmp_path])
    assert found == [outer, inner]  # never hidden


# ------------------------------------------------------------------------------------ item 5: liveness
def _job(d: Path, pid: int, submitted_at: float, host: str | None = None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cell.json").write_text(json.dumps({"id": "abc", "alias": "a"}))
    job = {
        "job_id": str(pid),
        "executor": "local",
        "folder": str(d / "_submitit"),
        "group": "g",
        "submitted_at": submitted_at,
        "host": host or socket.gethostname(),
    }
    (d / "jobs.jsonl").write_text(json.dumps(job) + "\n")


def test_status_liveness_checks_host_pid_and_start_time(tmp_path):
    from harness.sweeps.status import cell_status

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _wait_started = process_start(child.pid)
        assert _wait_started is not None
        _job(tmp_path / "live", child.pid, time.time())
        assert cell_status(tmp_path / "live").state == "running"
        # the same pid, but the recorded job was submitted long before this process started: a reused pid
        _job(tmp_path / "reused", child.pid, time.time() - 3600)
        assert cell_status(tmp_path / "reused").state == "failed"
        # a local job of another host cannot be judged from here: unknown, never failed (no second trainer)
        _job(tmp_path / "remote", child.pid, time.time(), host="another-node")
        st = cell_status(tmp_path / "remote")
        assert st.state == "unknown" and "another-node" in st.detail
    finally:
        child.kill()
        child.wait()


def test_status_sees_a_run_lock_held_on_any_host(tmp_path):
    from harness.run.rundir import RunDirLock
    from harness.sweeps.status import cell_status

    _job(tmp_path / "c", 999999999, time.time(), host="another-node")
    with RunDirLock(tmp_path / "c"):
        st = cell_status(tmp_path / "c")
    assert st.state == "running" and f"pid {os.getpid()}" in st.detail


def test_insufficient_updates_cell_is_done(tmp_path):
    from harness.sweeps.status import cell_status

    _job(tmp_path / "c", 999999999, time.time())
    (tmp_path / "c" / "result.json").write_text(
        json.dumps({"status": "insufficient_updates", "updates": {"made": 0, "expected": 4}})
    )
    st = cell_status(tmp_path / "c")
    assert st.state == "done" and "0 of 4" in st.detail


def test_a_sweep_inside_a_run_is_refused_in_its_dry_run(tmp_path, capsys):
    run = tmp_path / "rd"
    run.mkdir()
    (run / "config.yaml").write_text("{}")
    (run / "result.json").write_text("{}")
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "s", "base": tiny_pocket_base(), "seeds": [0]}))
    assert main(["sweep", str(spec), "--runs-dir", str(run / "runs"), "--dry-run"]) == 2
    assert "inside the run directory" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--runs-dir", str(tmp_path / "ok"), "--results-dir", str(run), "--dry-run"]) == 2
    assert "is a run directory" in capsys.readouterr().err


def test_a_spec_named_sweep_yaml_and_a_result_json_above_do_not_block_train_or_sweep(tmp_path, capsys):
    """Issue 29 item 3: placement used to trust file names in every ancestor, blaming the wrong directory."""
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"name": "s", "base": tiny_pocket_base(), "seeds": [0]}))
    (tmp_path / "result.json").write_text("{}")  # e.g. some other tool's output in the project root
    check_placement(tmp_path / "runs" / "r", "run")
    check_placement(tmp_path / "runs", "sweep")
    check_placement(tmp_path / "results", "report")
    assert main(["train", str(cfg_file(tmp_path)), "--run-dir", str(tmp_path / "runs" / "r"), "--dry-run"]) == 0
    cmd = ["sweep", str(tmp_path / "sweep.yaml"), "--runs-dir", str(tmp_path / "sw"), "--dry-run"]
    assert main(cmd) == 0, capsys.readouterr().err
