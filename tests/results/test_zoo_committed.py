"""The committed methods zoo (results/methods_zoo, issue 38) recomputes from its committed raw runs
(results/methods_zoo/runs/*.tar.xz) within the stated tolerance (harness.results.tolerance: strings, counts and
marks equal, floats within 1e-9 relative), never byte for byte; a changed run must fail the comparison."""

import io
import json
import tarfile
from pathlib import Path

import pandas as pd

from harness.results.archive import unpacked
from harness.results.collect import collect
from harness.results.entropy_table import entropy_table
from harness.results.table import build_leaderboard, render
from harness.results.tolerance import json_differences

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "results" / "methods_zoo"


def _records(csv_text: str) -> list[dict]:
    df = pd.read_csv(io.StringIO(csv_text)).drop(columns=["source"])  # the folder the runs were read from
    return df.astype(object).where(df.notna(), None).to_dict("records")


def _shift(obj, key: str, by: float):
    if isinstance(obj, dict):
        return {k: v + by if k == key else _shift(v, key, by) for k, v in obj.items()}
    return [_shift(v, key, by) for v in obj] if isinstance(obj, list) else obj


def _recomputed(runs) -> tuple[list[dict], str]:
    with unpacked(runs) as folder:
        col = collect([folder])
        return _records(render(build_leaderboard(col), "csv")), entropy_table(col)


def test_the_zoo_leaderboard_and_its_marks_recompute_from_the_committed_runs():
    assert sorted((ZOO / "runs").glob("*.tar.xz")), "no raw runs committed for the zoo"
    rows, entropy = _recomputed(ZOO / "runs")
    assert json_differences(_records((ZOO / "leaderboard.csv").read_text()), rows) == []
    committed = (ZOO / "entropy.md").read_text()
    assert entropy.count("**") == committed.count("**") and entropy.splitlines()[-1] == committed.splitlines()[-1]


def test_a_changed_run_fails_the_comparison(tmp_path):
    (archive,) = (ZOO / "runs").glob("*.tar.xz")
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(tmp_path / "runs", filter="data")
    (run,) = (tmp_path / "runs").glob("grpo__s0__*")
    for path in (run / "result.json", run / "eval" / "step_50.json"):  # GRPO seed 0 scores 1 point more
        path.write_text(json.dumps(_shift(json.loads(path.read_text()), "avg@4", 0.01)))
    rows, _ = _recomputed(tmp_path / "runs")
    assert json_differences(_records((ZOO / "leaderboard.csv").read_text()), rows) != []
