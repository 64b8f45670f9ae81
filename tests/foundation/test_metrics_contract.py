"""One run, one end entropy: result.json's summary (harness.run.records.summarize_metrics, what every backend writes),
``harness mechanism`` (h_end / h_start of the baseline's runs) and the leaderboard's H start / H end columns all
read harness/run/metrics.py's window, edge_steps(N) = min(5, max(1, N // 10)). An 80-step run (a tenth would be 8)
and a 500-step run (a tenth would be 50; the mechanism's registered window is 5) show the clamp."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from harness.results.collect import collect
from harness.results.table import build_leaderboard
from harness.run.metrics import EDGE_MAX, edge_means, edge_steps, summarize
from harness.run.records import summarize_metrics
from harness.studies.mechanism import WINDOW, analyse

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("results_fixtures", ROOT / "tests" / "results" / "conftest.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

DECAY = 0.005  # slow enough that 500 steps do not underflow; the windows' means stay distinct


def test_the_window_definition():
    assert [edge_steps(n) for n in (1, 9, 15, 25, 49, 50, 59, 60, 80, 500)] == [1, 1, 1, 2, 4, 5, 5, 5, 5, 5]
    # the old rule (n // 10, at least 1) for every run of at most 59 steps: quickstart's 50 steps -> 5
    assert all(edge_steps(n) == max(1, n // 10) for n in range(1, 60))
    assert WINDOW == EDGE_MAX == edge_steps(500) == 5  # docs/mechanism_prereg.md registers 5 steps
    assert edge_means([1.0, None, 3.0]) == (1.0, 3.0)  # a step without the value is skipped
    assert summarize([{"step": 1, "entropy": 2.0}, {"no_step": 1}]) == {
        "entropy_start": 2.0,
        "entropy_end": 2.0,
        "reward_start": None,
        "reward_end": None,
    }


@pytest.mark.parametrize("steps", [80, 500])
def test_summary_mechanism_and_table_agree_on_one_run(tmp_path, steps):
    d = fixtures.make_run(tmp_path / "runs", "grpo0", steps=steps, decay=DECAY, eval_every=10)
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    h = [1.0 * math.exp(-DECAY * t) for t in range(1, steps + 1)]
    by_hand = {"entropy_start": sum(h[:5]) / 5, "entropy_end": sum(h[-5:]) / 5}  # the clamp: 5, not steps // 10

    summary = json.loads((d / "result.json").read_text())["summary"]
    assert summary == summarize_metrics(rows)  # the fixture writes what a backend writes
    assert summary["entropy_start"] == pytest.approx(by_hand["entropy_start"])
    assert summary["entropy_end"] == pytest.approx(by_hand["entropy_end"])

    col = collect([tmp_path / "runs"])
    ratio = analyse(col)["sizes"]["pocket-1m"]["grpo_entropy_ratio"]["mean"]
    assert ratio == pytest.approx(summary["entropy_end"] / summary["entropy_start"], rel=1e-12)

    row = build_leaderboard(col).rows.iloc[0]
    assert row["entropy_start_mean"] == pytest.approx(summary["entropy_start"], rel=1e-12)
    assert row["entropy_end_mean"] == pytest.approx(summary["entropy_end"], rel=1e-12)
