"""The leaderboard's entropy columns (H start, H end): per run the mean ``entropy`` over its first / last
``edge_steps(N)`` logged steps (harness/run/metrics.py), then mean ± 95% Student-t CI over seeds, in every format;
checked against values worked out by hand on fixture runs whose entropy is H_t = h0·exp(-decay·t)."""

import json
import math

import pytest

from harness.results.collect import collect
from harness.results.table import build_leaderboard, render, run_entropy

T_975_2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (3 seeds)
DECAY, STEPS = 0.08, 30  # 30 steps -> a window of 3 steps at each end
H0 = {0: 1.0, 1: 1.2, 2: 0.8}


def _window_mean(h0, steps):
    return sum(h0 * math.exp(-DECAY * t) for t in steps) / len(steps)


def _expected(which):
    steps = [1, 2, 3] if which == "start" else [28, 29, 30]
    vals = [_window_mean(H0[s], steps) for s in H0]
    mean = sum(vals) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / 2)
    return mean, T_975_2 * sd / math.sqrt(3)


def _drop_entropy(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    text = "".join(json.dumps({k: v for k, v in r.items() if k != "entropy"}) + "\n" for r in rows)
    (run_dir / "metrics.jsonl").write_text(text)


@pytest.fixture
def three_seeds(runs_root, mk):
    for s, h0 in H0.items():
        mk(runs_root, f"grpo{s}", seed=s, h0=h0, steps=STEPS, decay=DECAY)
        mk(runs_root, f"kl{s}", method="kl_cov", seed=s, h0=h0, steps=STEPS, decay=DECAY)
    return runs_root


def test_entropy_columns_are_the_seed_mean_and_ci_of_the_window_means(three_seeds):
    lb = build_leaderboard(collect([three_seeds]))
    assert lb.show_entropy
    row = lb.rows[lb.rows["method"] == "grpo"].iloc[0]
    for c, which in (("entropy_start", "start"), ("entropy_end", "end")):
        mean, half = _expected(which)
        assert row[f"{c}_mean"] == pytest.approx(mean) and row[f"{c}_ci"] == pytest.approx(half)
        assert row[f"{c}_n"] == 3
    md = render(lb, "md")
    head = md.splitlines()[0]
    assert head.endswith("| H start | H end |")
    mean, half = _expected("end")
    assert f"{mean:.3f} ± {half:.3f} (n=3)" in md.splitlines()[2]
    csv = render(lb, "csv")
    assert "entropy_start_mean,entropy_start_ci,entropy_start_std,entropy_start_n" in csv.splitlines()[0]
    assert "H end" in render(lb, "html") and f"{mean:.3f} $\\pm$ {half:.3f}" in render(lb, "tex")
    assert any(n.startswith("H start / H end:") for n in lb.notes)


def test_entropy_is_never_bolded_and_a_single_seed_has_no_interval(runs_root, mk):
    mk(runs_root, "a", seed=0, h0=1.0, steps=STEPS, decay=DECAY)
    mk(runs_root, "b", method="kl_cov", seed=0, h0=3.0, steps=STEPS, decay=DECAY)
    lb = build_leaderboard(collect([runs_root]))
    assert all("entropy" not in b for b in lb.rows["best"])
    line = render(lb, "md").splitlines()[2]
    assert line.endswith(f"| {_window_mean(1.0, [1, 2, 3]):.3f} (n=1) | {_window_mean(1.0, [28, 29, 30]):.3f} (n=1) |")


def test_the_window_is_clamped_at_five_steps(runs_root, mk):
    mk(runs_root, "long", seed=0, h0=1.0, steps=80, decay=DECAY)  # a tenth would be 8: the window is 5
    e = run_entropy(collect([runs_root])).iloc[0]
    assert e["entropy_start"] == pytest.approx(_window_mean(1.0, range(1, 6)))
    assert e["entropy_end"] == pytest.approx(_window_mean(1.0, range(76, 81)))


def test_a_run_without_entropy_shows_a_dash_and_is_left_out_of_n(runs_root, mk):
    mk(runs_root, "a", seed=0, steps=STEPS, decay=DECAY)
    d = mk(runs_root, "b", seed=1, steps=STEPS, decay=DECAY)
    _drop_entropy(d)
    lb = build_leaderboard(collect([runs_root]))
    assert lb.rows.iloc[0]["entropy_end_n"] == 1  # the run that logged no entropy is not counted as 0


def test_no_entropy_columns_when_no_run_logged_entropy(runs_root, mk):
    d = mk(runs_root, "a", seed=0, steps=STEPS)
    _drop_entropy(d)
    lb = build_leaderboard(collect([runs_root]))
    assert not lb.show_entropy and "H start" not in render(lb, "md") and "entropy_start" not in render(lb, "csv")
