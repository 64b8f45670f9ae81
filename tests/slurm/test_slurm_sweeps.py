"""Sweeps on a real single-node SLURM cluster through submitit (marker `slurm`; see conftest.py).

One mixed sweep of cheap job targets (tests.helpers.sweep_targets) is submitted first so that its slow cells (a job
that hits its time limit) run while the other tests go on: an array that completes, a job that raises, one
that is scancel-led, one requeued mid-run that resumes from its checkpoint, fake-GPU placement, setup lines.
A real pocket sweep goes through `harness sweep --executor slurm --wait`, with one group sbatch refuses, and a
second submission skips the finished cells.
"""

import json
import re
import subprocess
import time

import pytest
import submitit
import yaml

from harness.cli import main
from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from harness.sweeps.status import statuses
from harness.sweeps.submit import submit_cells, wait_for
from tests.helpers import sweep_targets as testing

pytestmark = pytest.mark.slurm
STOPPED = re.compile(r"interrupted \(checkpoint requested by the job\) after step (\d+)")  # pocket's train.log
TARGET = "tests.helpers.sweep_targets:behave"
MIXED = {
    "name": "mixed",
    "base": {"behaviour": "ok"},
    "grid": {"behaviour": ["ok:a", "ok:b", "raise", "forever", "steps:20", "ok:gpu", "forever:timeout", "hang"]},
    "resources": {
        "default": {
            "partition": "debug",
            "timeout_min": 10,
            "cpus_per_task": 1,
            "setup": ["export HARNESS_SWEEP_SETUP=yes"],
            "additional_parameters": {"comment": "harness-ci"},
        },
        "groups": [
            {"match": {"behaviour": "ok:gpu"}, "gpus_per_node": 1},
            # submitit's USR2 arrives (signal_delay_s > limit: at once); no requeue left -> failed, "timed-out"
            {"match": {"behaviour": "forever:timeout"}, "timeout_min": 1, "max_num_timeout": 0},
            # ignores USR2: SLURM itself kills it at the limit -> sacct TIMEOUT
            {"match": {"behaviour": "hang"}, "timeout_min": 1, "signal_delay_s": 5},
        ],
    },
}


def wait_until(pred, timeout_s: float, what: str, poll_s: float = 0.5):
    end = time.time() + timeout_s
    while time.time() < end:
        value = pred()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module", autouse=True)
def time_limited(slurm_cluster, tmp_path_factory):
    """A pocket cell under a real 3-minute limit with SLURM's warning 100 s before it, submitted before the other
    tests so that the warning (it comes up to ~30 s late: slurmctld checks periodically) arrives while they run."""
    runs = tmp_path_factory.mktemp("time-limit")
    spec = load_spec(
        {
            "name": "pocket-time-limit",
            "base": testing.tiny_pocket_base(steps=100000, checkpoint_every=100000),
            "seeds": [0],
            "resources": {"default": {"partition": "debug", "timeout_min": 3, "signal_delay_s": 100}},
        }
    )
    (cell,) = expand(spec)
    d = C.materialise(cell, runs, spec.name)
    submit_cells([cell], runs, "slurm", sweep=spec.name, progress=False)
    yield d
    subprocess.run(["scancel", C.last_job(d)["job_id"]])


@pytest.fixture(scope="module")
def mixed(slurm_cluster, tmp_path_factory):
    runs = tmp_path_factory.mktemp("mixed")
    cells = expand(load_spec(MIXED), validate=testing.validate)
    for c in cells:
        C.materialise(c, runs, "mixed", command="true")
    report = submit_cells(cells, runs, "slurm", sweep="mixed", target=TARGET, progress=False)
    assert len(report.submitted) == len(cells) and not report.refused
    yield {c.config["behaviour"]: C.cell_dir(runs, c) for c in cells}
    subprocess.run(["scancel", *{j.split("_")[0] for j in report.job_ids.values()}])  # nothing left behind


def state(d):
    return statuses([d])[0]


def result(d):
    return json.loads((d / "result.json").read_text())


def test_array_job_completes_with_setup_lines(mixed):
    a, b = mixed["ok:a"], mixed["ok:b"]
    wait_until(lambda: state(a).state == "done" and state(b).state == "done", 90, "the ok cells")
    ra, rb = result(a), result(b)
    assert ra["env"]["SLURM_ARRAY_JOB_ID"] == rb["env"]["SLURM_ARRAY_JOB_ID"]  # one array for the group
    assert {ra["env"]["SLURM_ARRAY_TASK_ID"], rb["env"]["SLURM_ARRAY_TASK_ID"]} == {"0", "1"}
    assert ra["env"]["HARNESS_SWEEP_SETUP"] == "yes"
    assert C.last_job(a)["job_id"] == f"{ra['env']['SLURM_ARRAY_JOB_ID']}_0"
    groups = {C.last_job(d)["job_id"].split("_")[0] for d in mixed.values()}
    assert len(groups) == 4  # default group + three resource groups = four sbatch arrays


def test_gpus_per_node_places_the_job_on_a_gpu(mixed):
    d = mixed["ok:gpu"]
    wait_until(lambda: state(d).state == "done", 90, "the gpu cell")
    assert result(d)["env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_job_that_raises_fails_clearly_and_alone(mixed):
    d = mixed["raise"]
    st = wait_until(lambda: (s := state(d)).state == "failed" and s, 90, "the raising cell to fail")
    assert "RuntimeError: behaviour 'raise'" in st.detail
    assert any("sweep_targets.py" in line for line in st.tail)
    assert state(mixed["ok:a"]).state == "done"


def test_requeue_resumes_from_the_checkpoint(mixed):
    d = mixed["steps:20"]
    ckpt = d / "checkpoints" / "state.json"
    wait_until(lambda: ckpt.exists() and json.loads(ckpt.read_text())["step"] >= 3, 90, "3 steps")
    job = C.last_job(d)
    submitit.SlurmJob(folder=job["folder"], job_id=job["job_id"])._interrupt(timeout=True)  # USR2, as at a time-out
    st = wait_until(lambda: (s := state(d)).state in ("done", "failed") and s, 150, "the requeued cell")
    assert st.state == "done", st.detail
    r = result(d)
    assert r["attempts"] == 2 and r["resumed_from"][0] == 0 and r["resumed_from"][1] >= 3
    assert r["env"]["SLURM_RESTART_COUNT"] == "1"
    assert C.last_job(d)["job_id"] == job["job_id"]  # same job, requeued; identity never moved


def test_a_pocket_run_checkpoints_on_the_warning_signal_and_resumes_there(slurm_cluster, tmp_path):
    """A real pocket cell gets SLURM's time-limit warning (USR2 to the job's steps, as `--signal=USR2@N` sends it)
    mid-run, with no periodic checkpoint due (checkpoint_every 1000): it finishes its step, saves, the job is
    requeued and resumes from exactly that step: no step lost, none trained twice, each metrics row once."""
    spec = load_spec(
        {
            "name": "pocket-requeue",
            "base": {
                **testing.tiny_pocket_base(steps=300, checkpoint_every=1000),
                "method": {"name": "kl_cov", "k_ratio": 0.2},
            },
            "seeds": [0],
            "resources": {"default": {"partition": "debug", "timeout_min": 10}},
        }
    )
    (cell,) = expand(spec)
    d = C.materialise(cell, tmp_path, spec.name)
    report = submit_cells([cell], tmp_path, "slurm", sweep=spec.name, progress=False)
    metrics = d / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 6, 120, "6 pocket steps")
    job = C.last_job(d)
    subprocess.run(["scancel", "--signal=USR2", job["job_id"]], check=True)  # = submitit's _interrupt(timeout=True)
    logged_at_signal = len(metrics.read_text().splitlines())
    st = wait_until(lambda: (s := state(d)).state in ("done", "failed") and s, 240, "the requeued pocket cell")
    assert st.state == "done", st.detail
    res = result(d)
    assert res["status"] == "completed" and res["run_id"] == cell.id and res["steps"] == 300
    log = (d / "train.log").read_text()
    stopped = int(STOPPED.search(log).group(1))
    assert f"resumed from {d / 'checkpoints' / 'latest.pt'} at step {stopped}" in log
    assert log.count(f"run {cell.id}") == 2 and stopped >= logged_at_signal  # nothing trained before it is lost
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 301))
    # the attempts meet at the saved step: rows up to it come from the first (time/wall counts from an attempt's
    # start), the next row from the second, which started over
    wall = [r["time/wall"] for r in rows]
    assert all(wall[i] < wall[i + 1] for i in range(stopped - 1)) and wall[stopped] < wall[stopped - 1]
    print(f"step trace: USR2 at {logged_at_signal} rows; checkpoint of step {stopped}; resumed at step {stopped + 1}")
    print(f"  time/wall around it: {[(r['step'], round(r['time/wall'], 2)) for r in rows[stopped - 3 : stopped + 3]]}")
    assert C.last_job(d)["job_id"] == report.job_ids[cell.id]
    assert not (d / C.JOB_ERROR_FILE).exists()


def test_pocket_sweep_on_slurm_refused_group_and_second_submission(slurm_cluster, tmp_path, capsys):
    spec = {
        "name": "pocket-slurm",
        "base": testing.tiny_pocket_base(steps=3),
        "grid": {"method": [{"name": "grpo"}, {"name": "kl_cov", "k_ratio": 0.2}, {"name": "clip_cov"}]},
        "seeds": [0],
        "resources": {
            "default": {"partition": "debug", "timeout_min": 10},
            "groups": [{"match": {"method.name": "clip_cov"}, "partition": "no-such-partition"}],
        },
    }
    p = tmp_path / "pocket.yaml"
    p.write_text(yaml.safe_dump(spec))
    runs = tmp_path / "runs"
    rc = main(["sweep", str(p), "--executor", "slurm", "--runs-dir", str(runs), "--wait", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 1  # one cell failed: the refused one
    assert "sbatch refused group" in out and "invalid partition" in out.lower()
    rows = {r.alias: r for r in statuses(C.list_cell_dirs(runs))}
    assert rows["grpo__s0"].state == "done" and rows["kl_cov__s0"].state == "done"
    assert rows["clip_cov__s0"].state == "failed" and "submission refused" in rows["clip_cov__s0"].detail
    jobs = [C.last_job(rows[a].dir)["job_id"] for a in ("grpo__s0", "kl_cov__s0")]
    assert {j.split("_")[0] for j in jobs} == {jobs[0].split("_")[0]}  # one array job
    for a in ("grpo__s0", "kl_cov__s0"):
        res = json.loads((rows[a].dir / "result.json").read_text())
        assert res["status"] == "completed" and res["run_id"] == rows[a].id and res["steps"] == 3

    def sacct():  # result.json is written before the job process exits: SLURM says COMPLETED a moment later
        return subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", jobs[0].split("_")[0]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    wait_until(lambda: sacct().count("COMPLETED") == 2, 30, f"sacct to say COMPLETED twice: {sacct()}")

    rc = main(["sweep", str(p), "--executor", "slurm", "--runs-dir", str(runs), "--no-progress"])
    out, _ = capsys.readouterr()
    assert "skip 2 done" in out and "submitting 1 of 3" in out  # only the refused cell is tried again
    for a in ("grpo__s0", "kl_cov__s0"):
        assert len((rows[a].dir / "jobs.jsonl").read_text().splitlines()) == 1


def test_scancel_is_detected(mixed):
    d = mixed["forever"]
    wait_until(lambda: state(d).state == "running", 90, "the forever cell to run")
    subprocess.run(["scancel", C.last_job(d)["job_id"]], check=True)
    st = wait_until(lambda: (s := state(d)).state == "failed" and s, 60, "the cancelled cell to fail")
    assert st.detail.startswith("CANCELLED")
    assert state(mixed["ok:b"]).state == "done"


def test_time_limits_are_detected_and_nothing_hangs(mixed):
    rows = wait_for([mixed["forever:timeout"], mixed["hang"]], poll_s=2, progress=False, timeout_s=180)
    by = {r.dir: r for r in rows}
    assert not [r.alias for r in rows if r.state in ("pending", "running")], "cells still out after 180 s"
    t = by[mixed["forever:timeout"]]
    assert t.state == "failed" and "timed-out" in t.detail
    h = by[mixed["hang"]]
    assert h.state == "failed" and h.detail.startswith("TIMEOUT")
    assert any("TIME LIMIT" in line or "DUE TO TIME" in line for line in h.tail)


def test_a_real_time_limit_warning_checkpoints_and_requeues_a_pocket_run(time_limited):
    """SLURM's own timer: the first attempt saves the step it is in when the warning comes and is requeued; the
    second resumes there (the limit persists across requeues: it would be warned again; the test cancels it)."""
    d, log = time_limited, time_limited / "train.log"
    job = C.last_job(d)["job_id"]
    found = wait_until(lambda: log.exists() and STOPPED.search(log.read_text()), 300, "the warning's checkpoint")
    stopped = int(found.group(1))
    resumed = f"resumed from {d / 'checkpoints' / 'latest.pt'} at step {stopped}"
    try:
        wait_until(lambda: resumed in log.read_text(), 180, f"the second attempt to resume at step {stopped}")
    finally:
        subprocess.run(["scancel", job])
    assert stopped > 0
    attempts = subprocess.run(["sacct", "-nXPD", "-j", job, "-o", "State"], capture_output=True, text=True).stdout
    assert attempts.split()[0] == "REQUEUED"
