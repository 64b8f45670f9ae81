"""`harness sweep` / `harness status` end to end: a real tiny pocket cell on the local executor, dry runs."""

import json
from pathlib import Path

import yaml

from harness.cli import main
from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from harness.sweeps.submit import submit_cells
from tests.helpers import sweep_targets as testing

TINY = {
    "name": "tiny",
    "base": testing.tiny_pocket_base(steps=2),
    "grid": {"method": [{"name": "kl_cov", "k_ratio": 0.2}]},
    "seeds": [0],
}


def test_pocket_sweep_on_the_local_executor_then_skip(tmp_path, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY))
    runs = tmp_path / "runs"
    assert main(["sweep", str(spec), "--runs-dir", str(runs), "--no-progress"]) == 0
    out = capsys.readouterr().out
    (d,) = [p.parent for p in runs.glob("*/cell.json")]
    assert d.name.startswith("s0__")  # single-value axes stay out of the alias
    result = json.loads((d / "result.json").read_text())
    assert result["status"] == "completed" and result["run_id"] == d.name.rsplit("__", 1)[1]  # id = config hash
    assert result["steps"] == 2 and (d / "metrics.jsonl").exists()
    assert "harness train" in (d / "launch.sh").read_text()
    copy = yaml.safe_load((runs / "sweep.yaml").read_text())
    assert copy == TINY  # the spec as submitted (its base was inline already)
    assert "done     s0 " in out

    assert main(["sweep", str(spec), "--runs-dir", str(runs), "--no-progress"]) == 0  # second submission
    out = capsys.readouterr().out
    assert "skip 1 done" in out and "nothing to submit" in out
    assert len((d / "jobs.jsonl").read_text().splitlines()) == 1

    assert main(["status", str(runs)]) == 0
    assert "1 cells: done 1, failed 0" in capsys.readouterr().out


def test_dry_run_of_the_paper_spec_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    spec = Path(__file__).resolve().parents[2] / "sweeps" / "paper_qwen25.yaml"
    assert main(["sweep", str(spec), "--dry-run", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "24 cells in 2 resource group(s)" in out
    assert "qwen2.5-32b__kl_cov__s0" in out and "--actor.model_name_or_path Qwen/Qwen2.5-32B" in out
    assert "slurm_additional_parameters: {'exclusive': True}" in out and "nodes: 4" in out
    assert not runs.exists()


def test_status_shows_failures_with_their_tail_and_how_to_resubmit(tmp_path, capsys):
    cells = expand(
        load_spec({"name": "t", "base": {"behaviour": "ok"}, "grid": {"behaviour": ["ok", "raise"]}}),
        validate=testing.validate,
    )
    for c in cells:
        C.materialise(c, tmp_path, "t", command="true")
    submit_cells(cells, tmp_path, "debug", target="tests.helpers.sweep_targets:behave", progress=False)
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 cells: done 1, failed 1" in out
    assert "RuntimeError: behaviour 'raise'" in out and "    | " in out
    assert f"--runs-dir {tmp_path} --only failed" in out


def test_status_of_a_spec_before_anything_ran(tmp_path, capsys):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY))
    assert main(["status", str(spec), "--runs-dir", str(tmp_path / "none")]) == 0
    assert "not submitted" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nothing-here")]) == 2


def test_status_of_a_runs_dir_lists_unsubmitted_cells_and_flags_stale_ones(tmp_path, capsys):
    from harness.commands.sweep import spec_copy

    spec = load_spec(dict(TINY, seeds=[0, 1]))
    cells = expand(spec)
    C.materialise(cells[0], tmp_path, "tiny")
    (tmp_path / "sweep.yaml").write_text(spec_copy(spec, "tiny.yaml"))
    old = expand(load_spec(dict(TINY, base=dict(TINY["base"], train=dict(TINY["base"]["train"], steps=3)))))[0]
    C.materialise(old, tmp_path, "tiny")  # a cell of an earlier version of the spec
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 cells: pending 3" in out
    lines = [line for line in out.splitlines() if line.startswith("pending")]
    assert [line.split()[2] for line in lines] == [cells[0].id, cells[1].id, old.id]
    assert lines[2].endswith("[not a cell of sweep.yaml any more]") and "[not" not in lines[0]
