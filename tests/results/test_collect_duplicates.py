"""Issue 29 item 5: one run id in two directories (a copy, a rerun elsewhere). The table kept the first copy it
read, even a failed one, hiding the completed copy. The most finished copy is read; the other is named."""

import json

import pytest

from harness.cli import main
from harness.results.collect import collect


def _same_id(d_failed, d_done):
    rid = json.loads((d_done / "result.json").read_text())["run_id"]
    res = json.loads((d_failed / "result.json").read_text())
    res.update(run_id=rid, status="failed", error="RuntimeError: node lost", eval=None)
    (d_failed / "result.json").write_text(json.dumps(res))
    return rid


@pytest.mark.parametrize("failed_first", [True, False])
def test_the_completed_copy_of_a_run_id_wins_over_a_failed_one(runs_root, mk, suite, capsys, failed_first):
    names = ("a_copy", "b_run") if failed_first else ("b_copy", "a_run")  # read in sorted order
    failed = mk(runs_root, names[0], suites={"arith": suite("arith", 0.25)})
    done = mk(runs_root, names[1], suites={"arith": suite("arith", 0.75)})
    rid = _same_id(failed, done)
    with pytest.warns(UserWarning, match=rid):
        col = collect([runs_root])
    assert list(col.runs["run_dir"]) == [str(done)] and list(col.runs["status"]) == ["completed"]
    assert any(str(failed) in w and str(done) in w for w in col.warnings)
    assert main(["table", str(runs_root), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert ",75," in out and ",25," not in out and "no completed run" not in out + err


def test_two_completed_copies_keep_the_first_and_name_the_second(runs_root, mk, suite):
    first = mk(runs_root, "a", suites={"arith": suite("arith", 0.5)})
    second = mk(runs_root, "b", suites={"arith": suite("arith", 0.5)})
    rid = json.loads((first / "result.json").read_text())["run_id"]
    res = json.loads((second / "result.json").read_text())
    (second / "result.json").write_text(json.dumps({**res, "run_id": rid}))
    with pytest.warns(UserWarning, match="counted once"):
        col = collect([runs_root])
    assert list(col.runs["run_dir"]) == [str(first)]
