"""The submission layer on submitit's debug and local executors, with cheap job targets (no training)."""

import json

import pytest

from harness.commands.sweep import select
from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from harness.sweeps.status import cell_status, format_table, statuses, sweep_status
from harness.sweeps.submit import submit_cells
from tests.helpers import sweep_targets as testing

TARGET = "tests.helpers.sweep_targets:behave"


def make(tmp_path, behaviours, seeds=(0,), resources=None):
    spec = load_spec(
        {
            "name": "t",
            "base": {"behaviour": "ok"},
            "grid": {"behaviour": list(behaviours)},
            "seeds": list(seeds),
            "resources": resources or {},
        }
    )
    cells = expand(spec, validate=testing.validate)
    for c in cells:
        C.materialise(c, tmp_path, "t", command="true")
    return cells


def by_behaviour(tmp_path, cells):
    rows = statuses([C.cell_dir(tmp_path, c) for c in cells])
    return {c.config["behaviour"]: r for c, r in zip(cells, rows)}


def test_debug_executor_done_and_failed(tmp_path):
    cells = make(tmp_path, ["ok", "raise"])
    report = submit_cells(cells, tmp_path, "debug", target=TARGET, progress=False)
    assert len(report.submitted) == 2 and not report.refused
    st = by_behaviour(tmp_path, cells)
    assert st["ok"].state == "done"
    assert st["raise"].state == "failed" and "RuntimeError: behaviour 'raise'" in st["raise"].detail
    assert any("sweep_targets.py" in line for line in st["raise"].tail)  # the traceback tail
    assert "failed" in format_table(list(st.values()))


def test_local_executor_records_jobs_and_one_failure_leaves_the_others(tmp_path):
    cells = make(tmp_path, ["ok", "raise"])
    submit_cells(cells, tmp_path, "local", target=TARGET, progress=False)
    st = by_behaviour(tmp_path, cells)
    assert [st[b].state for b in ("ok", "raise")] == ["done", "failed"]
    for c in cells:
        job = C.last_job(C.cell_dir(tmp_path, c))
        assert job["executor"] == "local" and job["job_id"].isdigit()
    assert "log" in st["raise"].tail[-1]  # points at the submitit stderr log


def test_many_cells_finishing_together_corrupt_nothing(tmp_path):
    """Four local jobs wait for each other, then write their results at once: state is rebuilt from each dir."""
    cells = make(tmp_path, ["barrier:4"], seeds=range(4), resources={"default": {"array_parallelism": 4}})
    submit_cells(cells, tmp_path, "local", target=TARGET, progress=False)
    rows = sweep_status(tmp_path)
    assert [r.state for r in rows] == ["done"] * 4
    pids = set()
    for c in cells:
        result = json.loads((C.cell_dir(tmp_path, c) / "result.json").read_text())
        assert result["run_id"] == c.id and result["seed"] == c.config["seed"]
        pids.add(result["pid"])
    assert len(pids) == 4  # really four processes, not one after another in one
    assert not list(tmp_path.glob("*/.*.tmp"))  # no torn atomic writes left behind


def test_resubmission_skips_done_and_selects_failed(tmp_path):
    cells = make(tmp_path, ["ok", "raise"])
    submit_cells(cells, tmp_path, "debug", target=TARGET, progress=False)
    existing = {c.id: cell_status(C.cell_dir(tmp_path, c)) for c in cells}
    todo, skipped = select(cells, existing, None)
    assert [c.config["behaviour"] for c in todo] == ["raise"]
    assert skipped["done (result.json)"] == [cells[0].alias]
    todo, _ = select(cells, existing, ["failed"])
    assert [c.config["behaviour"] for c in todo] == ["raise"]
    todo, _ = select(cells, existing, ["pending"])
    assert todo == []


def test_resubmitting_clears_the_old_error(tmp_path):
    cells = make(tmp_path, ["raise"])
    submit_cells(cells, tmp_path, "debug", target=TARGET, progress=False)
    d = C.cell_dir(tmp_path, cells[0])
    assert cell_status(d).state == "failed"
    (d / "config.yaml").write_text("behaviour: ok\n")  # "fix the bug", then resubmit
    submit_cells(cells, tmp_path, "debug", target=TARGET, progress=False)
    assert cell_status(d).state == "done"
    assert len((d / "jobs.jsonl").read_text().splitlines()) == 2
    (kept,) = (d / "errors").glob("*-job_error.json")  # the first attempt's traceback is kept, not deleted
    assert "RuntimeError" in json.loads(kept.read_text())["error"]


def test_states_from_files_alone(tmp_path):
    cells = make(tmp_path, ["ok"])
    d = C.cell_dir(tmp_path, cells[0])
    assert cell_status(d).state == "pending" and cell_status(d).detail == "not submitted"
    C.record_submit_error(d, "sbatch: error: invalid partition specified: gpu", "slurm")
    st = cell_status(d)
    assert st.state == "failed" and "invalid partition" in st.detail
    C.clear_errors(d)
    C.record_job(d, "123_4", "slurm", tmp_path / "_submitit" / "x", "g0")
    assert cell_status(d, slurm={"123_4": "RUNNING"}).state == "running"
    assert cell_status(d, slurm={"123_4": "PENDING"}).state == "pending"
    assert cell_status(d, slurm={"123_4": "TIMEOUT"}).state == "failed"
    assert "CANCELLED" in cell_status(d, slurm={"123_4": "CANCELLED"}).detail
    assert cell_status(d, slurm=None).state == "unknown"
    (d / "result.json").write_text(json.dumps({"status": "failed", "error": "nan loss"}))
    assert cell_status(d).state == "failed" and "nan loss" in cell_status(d).detail
    (d / "result.json").write_text(json.dumps({"status": "completed"}))
    assert cell_status(d, slurm={"123_4": "CANCELLED"}).state == "done"


def test_an_earlier_attempts_error_is_no_verdict_while_the_requeued_job_runs(tmp_path):
    """A requeued SLURM job keeps its id: while sacct says it is out again, job_error.json (of an earlier attempt)
    does not make the cell failed; once the job ended it names the failure."""
    cells = make(tmp_path, ["ok"])
    d = C.cell_dir(tmp_path, cells[0])
    C.record_job(d, "77", "slurm", tmp_path / "_submitit" / "x", "g0")
    (d / C.JOB_ERROR_FILE).write_text(json.dumps({"job_id": "77", "attempt": 0, "error": "RuntimeError: attempt 0"}))
    assert cell_status(d, slurm={"77": "RUNNING"}).state == "running"
    assert cell_status(d, slurm={"77": "REQUEUED"}).state == "pending"
    st = cell_status(d, slurm={"77": "FAILED"})
    assert st.state == "failed" and st.detail == "RuntimeError: attempt 0"
    assert cell_status(d, slurm=None).state == "failed"  # no scheduler answer: the error file is all there is


def test_only_the_head_task_records_the_job_error(tmp_path, monkeypatch):
    """In a multi-node job every task runs the target; a worker's exception (it fails because its head did) must
    not overwrite the head's job_error.json."""
    from harness.sweeps.job import CellJob

    cells = make(tmp_path, ["raise"])
    d = C.cell_dir(tmp_path, cells[0])
    monkeypatch.setenv("SLURM_PROCID", "1")
    with pytest.raises(RuntimeError):
        CellJob(TARGET)(str(d))
    assert not (d / C.JOB_ERROR_FILE).exists()
    monkeypatch.setenv("SLURM_PROCID", "0")
    with pytest.raises(RuntimeError):
        CellJob(TARGET)(str(d))
    assert "behaviour 'raise'" in json.loads((d / C.JOB_ERROR_FILE).read_text())["error"]


def test_local_executor_refuses_multi_node_cells(tmp_path):
    cells = make(tmp_path, ["ok"], resources={"default": {"nodes": 2}})
    with pytest.raises(ValueError, match="local executor runs on one machine"):
        submit_cells(cells, tmp_path, "local", target=TARGET, progress=False)


def test_a_renamed_alias_still_finds_the_finished_run_by_its_id(tmp_path):
    cells = make(tmp_path, ["ok"])
    submit_cells(cells, tmp_path, "debug", target=TARGET, progress=False)
    d = C.cell_dir(tmp_path, cells[0])
    renamed = d.parent / f"an-older-alias__{cells[0].id}"
    d.rename(renamed)
    assert C.cell_dir(tmp_path, cells[0]) == renamed
    todo, skipped = select(cells, {cells[0].id: cell_status(renamed)}, None)
    assert todo == [] and skipped["done (result.json)"] == [cells[0].alias]
