"""The paper sweep's multi-node path on a real SLURM cluster rehearsed on one machine (marker ``slurm``; run by
scripts/ci_multinode.sh in the OpenRLHF venv): two slurmd nodes, n1 at 127.0.0.2 and n2 at 127.0.0.3, with
accounting (docs/gpu.md "The cluster rehearsal").

* Ray across both nodes through the OpenRLHF launcher's head/worker protocol with a tiny driver
  (harness/backends/openrlhf/rehearsal/raypair.py): a clean run places one actor per node and every job step ends
  COMPLETED; a head whose driver raises fails the cell with the head's error (the worker exits 3 and writes no
  job_error.json); a head task that dies without a word makes the worker exit 2.
* One cell of sweeps/rehearsal.yaml with ``openrlhf.nodes: 2`` through ``harness sweep --executor slurm``: the Ray
  head on task 0, a worker on task 1, OpenRLHF's actors and rollout engines on both nodes, training, in-loop evals,
  the final model, the after-training scores; ``harness status`` running, then done; sacct COMPLETED everywhere.
* The same cell with 6 steps warned like SLURM before a time limit (``scancel --signal=USR2``, what the warning
  reaches): the plug-in saves the next step through upstream's checkpoint, the job is requeued and resumes there:
  metrics rows 1..6 once each, upstream trains only the steps after the checkpoint.
"""

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from submitit.core.utils import JobPaths

from harness.backends.openrlhf import raycluster
from harness.cli import main
from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from harness.sweeps.status import statuses
from harness.sweeps.submit import submit_cells

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
RAY_TARGET = "harness.backends.openrlhf.rehearsal.raypair:ray_pair"
TWO_NODES = {"nodes": 2, "tasks_per_node": 1, "cpus_per_task": 1, "timeout_min": 15}


class Follower(threading.Thread):
    """Polls ``statuses`` (what ``harness status`` prints) of some cells every second until each is done or failed;
    ``states[dir]`` keeps the sequence of distinct states seen, ``sampled`` what ``sample(dir)`` returned while the
    cell ran."""

    def __init__(self, dirs, sample=None):
        super().__init__(daemon=True)
        self.dirs, self.sample = list(dirs), sample
        self.states = {d: [] for d in self.dirs}
        self.sampled = {d: [] for d in self.dirs}
        self.t0 = time.time()
        self.start()

    def run(self):
        polls = 0
        while True:
            rows = statuses(self.dirs)
            for r in rows:
                seq = self.states[r.dir]
                if not seq or seq[-1][0] != r.state:
                    seq.append((r.state, round(time.time() - self.t0, 1), r.detail))
                if r.state == "running" and self.sample is not None and polls % 10 == 5:
                    self.sampled[r.dir].append(self.sample(r.dir))
            polls += 1
            if all(r.state in ("done", "failed") for r in rows):
                return
            time.sleep(1)

    def finished(self, timeout_s: float) -> dict:
        self.join(timeout_s)
        assert not self.is_alive(), f"cells still out after {timeout_s:.0f} s: {self.states}"
        return {d: [s for s, _, _ in seq] for d, seq in self.states.items()}


def job_of(d: Path) -> str:
    return C.last_job(d)["job_id"]


def sacct(job: str, all_attempts: bool = False) -> list[tuple[str, str]]:
    """(JobID, State) of every step of the job, once accounting has its end (sacct lags the queue by ~1 s)."""
    args = ["sacct", "-n", "-P", "-j", job, "-o", "JobID,State,End"] + (["-D"] if all_attempts else [])
    deadline = time.time() + 30
    while True:
        rows = [line.split("|") for line in subprocess.run(args, capture_output=True, text=True).stdout.splitlines()]
        if rows and all(r[2] not in ("", "Unknown") for r in rows) or time.time() > deadline:
            return [(r[0], r[1].split()[0]) for r in rows]
        time.sleep(1)


def ray_dirs(job: str) -> list[Path]:
    """The Ray temp dirs of the job's nodes, all attempts (<root>/<SLURM_JOB_ID>.<restart>.<start>/<node>; an array
    task's own job id is not its 12_0 name)."""
    raw = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "JobIDRaw"], capture_output=True, text=True)
    return [d for jid in set(raw.stdout.split()) for d in raycluster.tmp_root().glob(f"{jid}.*/*")]


def ray_left(job: str) -> list[str]:
    """Ray processes of this job's nodes still alive."""
    left = []
    for temp_dir in ray_dirs(job):
        left += [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in raycluster.node_processes(temp_dir)]
    return left


def usr2_ignored(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << 11))  # SIGUSR2 = 12
    return False


# ------------------------------------------------------------------------------------------ Ray, tiny driver
@pytest.fixture(scope="module")
def ray_cells(slurm_multinode_cluster, tmp_path_factory):
    from harness.backends.openrlhf.rehearsal.raypair import validate

    runs = tmp_path_factory.mktemp("raypair")
    spec = load_spec(
        {
            "name": "raypair",
            "base": {"behaviour": "ray:ok"},
            "grid": {"behaviour": ["ray:ok", "ray:head_raises", "ray:head_dies"]},
            "resources": {"default": TWO_NODES},
        }
    )
    cells = expand(spec, validate=validate)
    for c in cells:
        C.materialise(c, runs, spec.name, command="true")
    report = submit_cells(cells, runs, "slurm", sweep=spec.name, target=RAY_TARGET, progress=False)
    assert not report.refused
    dirs = {c.config["behaviour"]: C.cell_dir(runs, c) for c in cells}
    follower = Follower(dirs.values())
    yield dirs, follower
    subprocess.run(["scancel", *{job_of(d).split("_")[0] for d in dirs.values()}])


@pytest.mark.timeout(900)
def test_ray_spans_both_nodes_and_every_step_completes(ray_cells):
    dirs, follower = ray_cells
    d = dirs["ray:ok"]
    seq = follower.finished(900)[d]
    assert seq[-1] == "done" and "running" in seq and "failed" not in seq, follower.states[d]
    placed = json.loads((d / "result.json").read_text())["placed"]
    where = sorted((p["ip"], p["node"], p["task"]) for p in placed)
    assert where == [("127.0.0.2", "n1", "0"), ("127.0.0.3", "n2", "1")]  # one actor inside each node's task
    assert (d / "worker.1.rc").read_text() == "0"
    states = sacct(job_of(d))
    assert [s for _, s in states] == ["COMPLETED"] * 3, states  # the job, its batch step, the srun step
    assert not (d / C.JOB_ERROR_FILE).exists() and not ray_left(job_of(d))


@pytest.mark.timeout(900)
def test_a_failing_head_fails_the_cell_with_its_own_error(ray_cells):
    dirs, follower = ray_cells
    d = dirs["ray:head_raises"]
    follower.finished(900)
    (st,) = statuses([d])
    assert st.state == "failed" and st.detail == "RuntimeError: the head's driver failed on purpose"
    assert (d / "worker.1.rc").read_text() == str(raycluster.EXIT_HEAD_FAILED)
    error = json.loads((d / C.JOB_ERROR_FILE).read_text())
    assert error["error"] == "RuntimeError: the head's driver failed on purpose"  # not the worker's, raised after
    worker_log = JobPaths(C.last_job(d)["folder"], job_id=job_of(d), task_id=1).stderr
    assert "worker task: the head task's launcher failed" in worker_log.read_text()
    assert {s for _, s in sacct(job_of(d))} == {"FAILED"}
    assert not ray_left(job_of(d))


@pytest.mark.timeout(900)
def test_a_head_that_dies_ends_its_worker_too(ray_cells):
    dirs, follower = ray_cells
    d = dirs["ray:head_dies"]
    follower.finished(900)
    assert (d / "worker.1.rc").read_text() == str(raycluster.EXIT_HEAD_LOST)  # no head.rc: the GCS went silent
    (st,) = statuses([d])
    assert st.state == "failed" and st.detail.startswith("FAILED")
    assert not (d / C.JOB_ERROR_FILE).exists()  # the head died before it could write one; the worker wrote none
    assert not ray_left(job_of(d))


# ------------------------------------------------------------------------------------------ OpenRLHF rehearsal
@pytest.fixture(scope="module")
def assets():
    """The rehearsal's data and model, built as scripts/ci_rehearsal.sh builds them (reused when unchanged)."""
    out = ROOT / ".cache" / "rehearsal"
    prepare = [sys.executable, "-m", "harness", "data", "prepare", "dapo-math-17k", "--source", "sample"]
    subprocess.run([*prepare, "--out", str(out)], check=True, capture_output=True)
    from harness.backends.openrlhf.rehearsal.assets import build

    build(out / "dapo-math-17k.jsonl", out, log=lambda *_: None)
    return out


def two_node_spec(assets: Path, name: str, steps: int) -> dict:
    """sweeps/rehearsal.yaml's grpo__s0 cell on two nodes (openrlhf.nodes: 2; the job's nodes follow from it)."""
    spec = yaml.safe_load((ROOT / "sweeps" / "rehearsal.yaml").read_text())
    base = spec["base"]
    base["model"]["name"] = str(assets / "model")
    base["task"]["name"] = str(assets / "dapo-math-17k.jsonl")
    base["openrlhf"]["nodes"] = 2
    base["train"]["steps"] = steps
    base["logging"] = {"progress": False}
    # rehearsal.yaml's 20-minute limit would cut (and requeue) a cell that loads slowly on a busy 2-core machine:
    # at load 20 one attempt logged no step in 19 minutes; only the warned test's own signal may requeue here
    spec["resources"]["default"]["timeout_min"] = 120
    spec.pop("exclude", None)  # it names cells of the full grid (the corrected cell's other seeds)
    return {**spec, "name": name, "grid": {"method": [{"name": "grpo"}]}, "seeds": [0]}


def cell_processes(d: Path) -> list[tuple[int, str]]:
    """(pid, name) of the cell's launcher processes (head and worker tasks) and of all its job's Ray processes."""
    import psutil

    found = {}
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info["cmdline"] or []
        if "harness.backends.openrlhf.launch" in argv and str(d) in argv:
            found[p.pid] = p
            found.update({c.pid: c for c in p.children(recursive=True)})
    for temp_dir in ray_dirs(job_of(d)):
        found.update({p.pid: p for p in raycluster.node_processes(temp_dir)})
    out = []
    for pid, p in found.items():
        try:
            out.append((pid, p.name(), usr2_ignored(pid)))
        except (OSError, psutil.Error):
            pass
    return out


def warn_at_first_step(d: Path, out: dict, timeout_s: float = 2400) -> None:
    """``scancel --signal=USR2`` (what SLURM's --signal=USR2@N warning reaches) once the cell logged a step; records
    how many steps it had logged then."""
    metrics, deadline = d / "metrics.jsonl", time.time() + timeout_s
    while not (metrics.exists() and metrics.read_text().strip()):
        if time.time() > deadline:
            return
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR2", job_of(d)], check=True)
    out["logged_at_signal"] = len(metrics.read_text().splitlines())


@pytest.fixture(scope="module")
def rehearsal(slurm_multinode_cluster, assets, tmp_path_factory):
    """Both OpenRLHF cells submitted at once through `harness sweep --executor slurm`: the clean one (4 steps) and
    the one to be warned (6 steps)."""
    dirs = {}
    for name, steps in (("rehearsal-2n", 4), ("rehearsal-2n-warned", 6)):
        runs = tmp_path_factory.mktemp(name)
        path = runs / "spec.yaml"
        path.write_text(yaml.safe_dump(two_node_spec(assets, name, steps)))
        assert main(["sweep", str(path), "--executor", "slurm", "--runs-dir", str(runs), "--no-progress"]) == 0
        (dirs[name],) = C.list_cell_dirs(runs)
    follower = Follower(dirs.values(), sample=cell_processes)
    warned = {}  # the warning goes out at the warned cell's first logged step, whichever test runs first
    threading.Thread(target=warn_at_first_step, args=(dirs["rehearsal-2n-warned"], warned), daemon=True).start()
    yield dirs, follower, warned
    subprocess.run(["scancel", *{job_of(d) for d in dirs.values()}])


@pytest.mark.timeout(2700)  # minutes each on an idle 2-core machine, far more under load
def test_the_two_node_rehearsal_cell_trains_evaluates_and_exports(rehearsal, capsys):
    dirs, follower, _ = rehearsal
    d = dirs["rehearsal-2n"]
    seq = follower.finished(2400)[d]
    assert seq[-1] == "done" and "running" in seq and "failed" not in seq, follower.states[d]
    capsys.readouterr()
    assert main(["status", str(d.parent), "--no-tails"]) == 0
    assert re.search(r"^done\s+s0\s", capsys.readouterr().out, re.M)
    print(f"two-node rehearsal cell: status {follower.states[d]}")
    result = json.loads((d / "result.json").read_text())
    assert result["status"] == "completed" and result["updates"] == {"made": 4, "expected": 4}
    assert [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert sorted(p.name for p in (d / "eval").glob("step_*.json")) == ["step_2.json", "step_4.json"]
    assert len(result["eval"]["suites"]) == 7 and (d / "checkpoints" / "final" / "config.json").is_file()
    log = (d / "openrlhf.log").read_text()
    assert "harness: ray cluster: all 2 nodes joined" in log
    for actor in ("PolicyModelActor", "RolloutRayActor"):  # Ray tags a remote node's output with its ip
        assert re.search(rf"\({actor} pid=\d+\)", log) and re.search(rf"\({actor} pid=\d+, ip=127\.0\.0\.3\)", log)
    assert "worker n2: the head ended: completed" in (d / "openrlhf.task1.log").read_text()
    states = sacct(job_of(d))
    print(f"sacct: {states}")
    assert [s for _, s in states] == ["COMPLETED"] * 3, states
    assert not (d / C.JOB_ERROR_FILE).exists() and not ray_left(job_of(d))
    seen = [p for sample in follower.sampled[d] for p in sample]
    assert {name for _, name, _ in seen} >= {"raylet", "gcs_server"}  # the launcher's and Ray's processes were seen
    assert not [p for p in seen if not p[2]], "processes of the run without SIGUSR2 ignored"


@pytest.mark.timeout(2700)  # minutes each on an idle 2-core machine, far more under load
def test_a_warned_two_node_cell_checkpoints_is_requeued_and_resumes_there(rehearsal):
    dirs, follower, warned = rehearsal
    d = dirs["rehearsal-2n-warned"]
    seq = follower.finished(2400)[d]
    assert "logged_at_signal" in warned, "the warned cell logged no step"
    logged_at_signal, job = warned["logged_at_signal"], job_of(d)
    print(f"warned cell: USR2 after {logged_at_signal} step(s); status {follower.states[d]}")
    assert seq[-1] == "done" and "failed" not in seq and "pending" in seq[seq.index("running") :], follower.states[d]
    train_log = (d / "train.log").read_text()
    stopped = int(re.search(r"interrupted \(checkpoint requested by the job\) after step (\d+)", train_log).group(1))
    assert logged_at_signal <= stopped < 6
    log = (d / "openrlhf.log").read_text()
    first, second = log.split("harness: launching OpenRLHF")[1:]  # the two attempts
    trained = [[int(s) for s in re.findall(r"Global step (\d+):", part)] for part in (first, second)]
    print(f"step trace: attempt 0 trained {trained[0]}, saved step {stopped}; attempt 1 trained {trained[1]}")
    assert trained == [list(range(1, stopped + 1)), list(range(stopped + 1, 7))]  # none lost, none repeated
    assert f"stopped after the checkpoint of step {stopped} the job asked for" in first
    assert "Loading the checkpoint" in second and f"'global_step': {stopped}" in second
    rows = [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (d / "eval").glob("step_*.json")) == ["step_2.json", "step_4.json", "step_6.json"]
    assert json.loads((d / "result.json").read_text())["status"] == "completed"
    attempts = [(j, s) for j, s in sacct(job, all_attempts=True) if j == job]
    print(f"sacct -D: {sacct(job, all_attempts=True)}")
    assert [s for _, s in attempts] == ["REQUEUED", "COMPLETED"]
    assert not (d / C.JOB_ERROR_FILE).exists() and not ray_left(job)
