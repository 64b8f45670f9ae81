"""Leaderboard uncertainty against scipy: Student-t CIs, paired deltas; with 3 seeds nothing is bold even where the
interval excludes zero (marks: tests/results/test_marks.py); insufficient-update runs flagged and never ranked;
settings split blocks; a run id counts once."""

import json
import shutil

import numpy as np
import pytest
from scipy import stats as st

from harness.results import stats
from harness.results.collect import collect
from harness.results.table import build_leaderboard, render


def test_mean_ci_matches_scipy():
    x = [0.31, 0.45, 0.38, 0.52]
    lo, hi = st.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=st.sem(x))
    iv = stats.mean_ci(x)
    assert iv.lo == pytest.approx(lo) and iv.hi == pytest.approx(hi) and iv.n == 4
    one = stats.mean_ci([0.7])
    assert one.mean == 0.7 and np.isnan(one.half) and not stats.excludes(one, 0.0)


def test_paired_diff_matches_scipy_ttest_rel():
    a = {0: 0.61, 1: 0.55, 2: 0.70, 3: 0.64, 9: 0.99}  # seed 9 has no partner: left out
    b = {0: 0.50, 1: 0.49, 2: 0.66, 3: 0.52}
    iv = stats.paired_diff(a, b)
    res = st.ttest_rel([a[k] for k in range(4)], [b[k] for k in range(4)])
    ci = res.confidence_interval(0.95)
    assert iv.n == 4 and iv.lo == pytest.approx(ci.low) and iv.hi == pytest.approx(ci.high)
    w = stats.welch_diff([1.0, 1.2, 0.9], [0.5, 0.7])
    ref = st.ttest_ind([1.0, 1.2, 0.9], [0.5, 0.7], equal_var=False).confidence_interval(0.95)
    assert w.lo == pytest.approx(ref.low) and w.hi == pytest.approx(ref.high) and not w.paired
    r = stats.paired_ratio({0: 0.2, 1: 0.3}, {0: 0.4, 1: 0.3})
    assert r.mean == pytest.approx(0.75) and r.n == 2


def _three(root, mk, suite, method, values, **kw):
    for seed, v in enumerate(values):
        mk(root, f"{method}{seed}{kw.get('model', '')}", method=method, seed=seed, suites={"A": suite("A", v)}, **kw)


def test_three_seeds_mark_nothing_even_where_the_paired_interval_excludes_zero(runs_root, mk, suite):
    _three(runs_root, mk, suite, "grpo", [0.50, 0.60, 0.40])
    _three(runs_root, mk, suite, "kl_cov", [0.60, 0.71, 0.49])  # +10, +11, +9 points: paired CI excludes 0
    _three(runs_root, mk, suite, "clip_cov", [0.55, 0.35, 0.45])  # Δ +5, -25, +5: an interval holding zero
    lb = build_leaderboard(collect([runs_root]))
    t = lb.rows.set_index("method")
    assert t.at["kl_cov", "delta_avg_suites"] == pytest.approx(10.0)
    d = [10.0, 11.0, 9.0]
    assert t.at["kl_cov", "delta_avg_suites_ci"] == pytest.approx(st.t.ppf(0.975, 2) * np.std(d, ddof=1) / 3**0.5)
    assert bool(t.at["kl_cov", "delta_avg_suites_paired"])
    assert (t["best"] == "").all() and not t["delta_avg_suites_marked"].any()  # 3 < 5 seeds: no test
    md = render(lb, "md")
    assert "**" not in md.split("\n\n")[0] and "+10.0 ± 2.5 |" in md
    assert "This table has at most 3 seed(s) per arm: no test is run and nothing is marked" in md


def test_one_seed_marks_nothing_and_says_so(runs_root, mk, suite):
    mk(runs_root, "g", method="grpo", suites={"A": suite("A", 0.2)})
    mk(runs_root, "k", method="kl_cov", suites={"A": suite("A", 0.9)})
    lb = build_leaderboard(collect([runs_root]))
    assert list(lb.rows["best"]) == ["", ""]
    md = render(lb, "md")
    assert "**" not in md.split("\n\n")[0] and "n = 1: one seed per row" in md


def test_insufficient_updates_is_flagged_and_never_ranked(runs_root, mk, suite):
    _three(runs_root, mk, suite, "grpo", [0.50, 0.52, 0.51, 0.53, 0.50])
    _three(runs_root, mk, suite, "rloo", [0.40, 0.42, 0.41, 0.44, 0.39])  # 5 seeds: grpo's lead is marked
    _three(runs_root, mk, suite, "kl_cov", [0.99, 0.98, 0.99, 0.99, 0.98], status="insufficient_updates")
    lb = build_leaderboard(collect([runs_root]))
    t = lb.rows.set_index("method")
    assert t.at["kl_cov", "flag"] == "insufficient_updates" and t.at["kl_cov", "best"] == ""
    assert np.isnan(t.at["kl_cov", "delta_avg_suites"])
    assert t.at["grpo", "best"] == "A;avg_suites;avg_samples"  # the flagged row is not the runner-up either
    md = render(lb, "md")
    assert "kl_cov [FLAG: insufficient_updates, not ranked]" in md and "status insufficient_updates" in md


def test_different_step_counts_are_separate_blocks_named_in_a_setting_column(runs_root, mk, suite):
    _three(runs_root, mk, suite, "grpo", [0.50, 0.52, 0.51])
    _three(runs_root, mk, suite, "kl_cov", [0.90, 0.92, 0.91])
    for d in runs_root.iterdir():
        if d.name.startswith("kl_cov"):
            cfg = (d / "config.yaml").read_text() + "train: {steps: 300}\n"
            (d / "config.yaml").write_text(cfg)
    for d in runs_root.iterdir():
        if d.name.startswith("grpo"):
            (d / "config.yaml").write_text((d / "config.yaml").read_text() + "train: {steps: 50}\n")
    lb = build_leaderboard(collect([runs_root]))
    t = lb.rows.set_index("method")
    assert t.at["kl_cov", "setting"] == "train.steps=300" and t.at["grpo", "setting"] == "train.steps=50"
    assert t.at["kl_cov", "best"] == "" and np.isnan(t.at["kl_cov", "delta_avg_suites"])  # never compared
    md = render(lb, "md")
    assert "| setting |" in md and "train.steps=300" in md and "differ in settings" in md


def test_a_run_passed_twice_counts_once(runs_root, mk, suite, tmp_path):
    _three(runs_root, mk, suite, "grpo", [0.50, 0.52])
    copy = tmp_path / "copy"
    shutil.copytree(runs_root / "grpo0", copy / "grpo0")
    with pytest.warns(UserWarning, match="counted once"):
        col = collect([runs_root, copy])
    assert len(col.runs) == 2
    lb = build_leaderboard(col)
    assert lb.rows.iloc[0]["A_n"] == 2
    assert json.loads((copy / "grpo0" / "result.json").read_text())["seed"] == 0
