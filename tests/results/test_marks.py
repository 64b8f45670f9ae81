"""Leaderboard marks under one family-wise rule (issue 35): Holm over every test of a table, at least 5 seeds per
arm, the adjustment named in every format's notes. Values are built by hand so each unadjusted p is known.

Twelve methods against GRPO in one block, 5 seeds, one suite; GRPO scores 50% on every seed and method j adds
d_j + z per seed, z = (−2, −1, 0, 1, 2) points (sd √2.5, standard error √0.5):

* m01: d = +3, t = 3/√0.5 = 3√2 on 4 dof. For 4 dof the two-sided p has the closed form
  p = 1 − (3/4)·(t/√x)·(1 − t²/(12x)), x = 1 + t²/4: x = 5.5, p = 0.013236 < 0.05 unadjusted;
* m02..m12: d = −0.15·j (j = 1..11), |t| ≤ 1.65/√0.5 = 2.33 < t(0.975, 4) = 2.776: p > 0.05.

GRPO is the runner-up (every other method is below 50), so the best-vs-runner-up test of m01 reads the same data as
its Δ test and counts once; a one-suite table shows each test in three columns (suite, both averages): m = 12.
Holm: the smallest p is multiplied by 12: 0.1588 > 0.05, nothing is marked. With d = +20 for m01 (t = 28.3,
p = 9.3e-6, ×12 = 1.1e-4) it is marked, as Δ and as the best cell, and nothing else is."""

import io
import math

import pandas as pd
import pytest
from scipy import stats as st

from harness.cli import main
from harness.results import marks, stats
from harness.results.collect import collect
from harness.results.table import build_leaderboard, render

Z = (-2, -1, 0, 1, 2)


def _p_4dof(t: float) -> float:
    x = 1 + t * t / 4
    return 1 - 0.75 * (t / math.sqrt(x)) * (1 - t * t / (12 * x))


def _table(root, mk, suite, lead: float, seeds=Z):
    for s, z in enumerate(seeds):
        mk(root, f"grpo{s}", method="grpo", seed=s, suites={"A": suite("A", 0.50)})
        mk(root, f"m01_{s}", method="m01", seed=s, suites={"A": suite("A", 0.50 + (lead + z) / 100)})
        for j in range(1, 12):
            v = 0.50 + (-0.15 * j + z) / 100
            mk(root, f"m{j + 1:02d}_{s}", method=f"m{j + 1:02d}", seed=s, suites={"A": suite("A", v)})
    return build_leaderboard(collect([root]))


def test_twelve_comparisons_one_unadjusted_p_below_005_and_nothing_is_marked(runs_root, mk, suite):
    lb = _table(runs_root, mk, suite, lead=3.0)
    t = lb.rows.set_index("method")
    p = _p_4dof(3 * math.sqrt(2))
    assert p == pytest.approx(0.0132356, abs=1e-6)
    assert t.at["m01", "delta_avg_suites"] == pytest.approx(3.0)
    assert t.at["m01", "delta_avg_suites_p"] == pytest.approx(p, rel=1e-6)
    assert t.at["m01", "delta_avg_suites_p_holm"] == pytest.approx(12 * p, rel=1e-6)
    assert t.at["m01", "A_p_runner_up"] == pytest.approx(p, rel=1e-6)  # vs GRPO: the same test
    unadjusted = [t.at[m, "delta_avg_suites_p"] for m in t.index if m != "grpo"]
    assert sum(q < 0.05 for q in unadjusted) == 1 and len(unadjusted) == 12
    assert not t["delta_avg_suites_marked"].any() and not t["delta_avg_samples_marked"].any()
    assert (t["best"] == "").all()
    assert lb.marks.tests == 12 and lb.marks.marked == 0 and lb.marks.unadjusted == 1
    note = next(n for n in lb.notes if n.startswith("MARKS:"))
    assert "Holm's adjustment over every test of the table (family-wise α = 0.05" in note
    assert "at least 5 seeds per arm" in note
    assert "m = 12 test(s): 0 marked (1 with unadjusted p < 0.05)" in note
    md = render(lb, "md")
    assert "**" not in md.split("\n\n")[0] and "+3.0 ± 2.0 |" in md  # the interval excludes 0, still no mark
    for fmt in ("tex", "html"):
        assert "m = 12 test(s): 0 marked" in render(lb, fmt)
    csv = pd.read_csv(io.StringIO(render(lb, "csv")))
    assert set(csv["mark_rule"]) == {"holm;alpha=0.05;m=12;min_seeds=5"} and not csv["delta_avg_suites_marked"].any()


def test_a_strong_effect_survives_holm_and_is_marked(runs_root, mk, suite):
    lb = _table(runs_root, mk, suite, lead=20.0)
    t = lb.rows.set_index("method")
    p = _p_4dof(20 / math.sqrt(0.5))
    assert t.at["m01", "delta_avg_suites_p"] == pytest.approx(p, rel=1e-4)
    assert t.at["m01", "delta_avg_suites_p_holm"] == pytest.approx(12 * p, rel=1e-4) and 12 * p < 0.05
    assert bool(t.at["m01", "delta_avg_suites_marked"]) and bool(t.at["m01", "delta_avg_samples_marked"])
    assert t.at["m01", "best"] == "A;avg_suites;avg_samples"
    assert [m for m in t.index if t.at[m, "delta_avg_suites_marked"]] == ["m01"]
    assert (t.drop(index="m01")["best"] == "").all()
    md = render(lb, "md")
    assert "| **70.0 ± 2.0 (n=5)** |" in md and "**+20.0 ± 2.0**" in md
    assert "m = 12 test(s): 1 marked (1 with unadjusted p < 0.05)" in md


def test_below_five_seeds_nothing_is_tested_or_marked_and_the_notes_say_so(runs_root, mk, suite):
    lb = _table(runs_root, mk, suite, lead=20.0, seeds=(-1.5, -0.5, 0.5, 1.5))
    t = lb.rows.set_index("method")
    assert t.at["m01", "delta_avg_suites"] == pytest.approx(20.0) and t.at["m01", "delta_avg_suites_ci"] < 3
    assert not t["delta_avg_suites_marked"].any() and (t["best"] == "").all()
    assert t["delta_avg_suites_p"].isna().all()
    note = next(n for n in lb.notes if n.startswith("MARKS:"))
    assert "This table has at most 4 seed(s) per arm: no test is run and nothing is marked" in note
    assert "**" not in render(lb, "md").split("\n\n")[0]


def test_holm_family_counts_a_test_once_and_ignores_untestable_ones():
    a = {s: 50.0 + 20 + z for s, z in enumerate(Z)}
    b = {s: 50.0 for s in range(5)}
    few = {s: 50.0 + 20 + z for s, z in enumerate(Z[:4])}
    cmps = [
        marks.Comparison("delta", 1, 0, "avg_suites", a, b),
        marks.Comparison("delta", 1, 0, "avg_samples", dict(a), dict(b)),  # the same test, another column
        marks.Comparison("best", 1, 0, "A", dict(a), dict(b)),  # and as best vs runner-up
        marks.Comparison("delta", 2, 0, "avg_suites", few, b),  # 4 common seeds: no test
    ]
    fam = marks.decide(cmps)
    assert fam.tests == 1 and fam.marked == 1 and fam.below_min == 1
    assert [c.marked for c in cmps] == [True, True, True, False] and math.isnan(cmps[3].p)
    assert cmps[0].p_holm == cmps[0].p  # a family of one


def test_difference_test_p_matches_scipy():
    a, b = {0: 0.61, 1: 0.55, 2: 0.70, 3: 0.64}, {0: 0.50, 1: 0.49, 2: 0.66, 3: 0.52}
    iv, p = stats.difference_test(a, b)
    assert iv.paired and p == pytest.approx(st.ttest_rel(list(a.values()), list(b.values())).pvalue)
    x, y = {0: 1.0, 1: 1.2, 2: 0.9}, {5: 0.5, 6: 0.7, 7: 0.4}
    iv, p = stats.difference_test(x, y)
    ref = st.ttest_ind(list(x.values()), list(y.values()), equal_var=False)
    assert not iv.paired and p == pytest.approx(ref.pvalue)


def test_metric_choice_and_refusal_naming_what_a_suite_has(runs_root, mk, suite, capsys):
    def res(avg, pas):
        r = suite("A", avg)
        r["metrics"].update({"avg@4_stderr": 0.02, "pass@4": pas, "pass@4_stderr": 0.03})
        return r

    for s, (avg, pas) in enumerate([(0.40, 0.70), (0.50, 0.80)]):
        mk(runs_root, f"g{s}", method="grpo", seed=s, suites={"A": res(avg, pas)})
    lb = build_leaderboard(collect([runs_root]), metric="pass")
    g = lb.rows.iloc[0]
    assert g["A_mean"] == pytest.approx(75.0) and g["A_se"] == pytest.approx(3.0) and lb.metric == "pass"
    assert any(n.startswith("protocol A: pass@4 | ") for n in lb.notes)
    assert any(n.startswith("Metric: pass@k: unbiased") for n in lb.notes)
    avg = build_leaderboard(collect([runs_root])).rows.iloc[0]
    assert avg["A_mean"] == pytest.approx(45.0) and avg["A_se"] == pytest.approx(2.0)
    with pytest.raises(ValueError) as e:
        build_leaderboard(collect([runs_root]), metric="maj")
    assert str(e.value).startswith("--metric maj: suite 'A' has no maj@4 in 2 run(s), e.g. ")
    assert str(e.value).endswith("its results hold avg@4, pass@4 (--metric avg or pass there)")
    assert main(["table", str(runs_root), "--metric", "maj"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --metric maj: suite 'A' has no maj@4") and err.count("\n") == 1
    assert main(["table", str(runs_root), "--metric", "pass", "--format", "csv"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert csv.at[0, "A_mean"] == pytest.approx(75.0) and csv.at[0, "metric"] == "pass"
    with pytest.raises(ValueError, match="--metric pass: --reference paper .* use --metric avg"):
        build_leaderboard(collect([runs_root]), metric="pass", reference="paper")


def test_the_notes_say_last_step_and_name_a_run_scored_before_its_last_step(runs_root, mk, suite):
    mk(runs_root, "g0", method="grpo", seed=0, suites={"A": suite("A", 0.5)})
    late = mk(runs_root, "g1", method="grpo", seed=1, steps=30, suites={"A": suite("A", 0.6)})
    import json

    res = json.loads((late / "result.json").read_text())
    res["eval"]["step"] = 25  # its last evaluation was before its last training step
    (late / "result.json").write_text(json.dumps(res))
    lb = build_leaderboard(collect([runs_root]))
    assert any(n.startswith("STEP: last step: each run's final evaluation") for n in lb.notes)
    early = next(n for n in lb.notes if "no evaluation at their last training step" in n)
    assert early.endswith(f"{late} (step 25 of 30)")
