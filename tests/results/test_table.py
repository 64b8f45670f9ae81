"""Leaderboard numbers against values worked out by hand, the paper's Avg., protocols, formats, CLI."""

import io
import math

import pandas as pd
import pytest

from harness.cli import main
from harness.results.collect import collect
from harness.results.reference import PAPER_SUITES, load_protocol, load_reference
from harness.results.table import build_leaderboard, render

# suite A: 10 problems x 4 samples (weight 40); suite B: 20 problems x 1 sample (weight 20)


def _runs(root, mk, suite):
    def two(a, b):
        return {"A": suite("A", a, n_problems=10, n_samples=4), "B": suite("B", b, n_problems=20, n_samples=1)}

    mk(root, "grpo0", method="grpo", seed=0, suites=two(0.5, 0.8))
    mk(root, "grpo1", method="grpo", seed=1, suites=two(0.7, 0.6))
    mk(root, "kl0", method="kl_cov", seed=0, suites=two(0.9, 0.3))
    return root


def _row(lb, method, source="runs"):
    t = lb.rows
    return t[(t["method"] == method) & (t["source"] == source)].iloc[0]


def test_leaderboard_numbers_by_hand(runs_root, mk, suite):
    lb = build_leaderboard(collect([_runs(runs_root, mk, suite)]))
    g, k = _row(lb, "grpo"), _row(lb, "kl_cov")
    assert g["A_mean"] == pytest.approx(60.0) and g["A_std"] == pytest.approx(math.sqrt(200)) and g["A_n"] == 2
    assert g["B_mean"] == pytest.approx(70.0)
    # plain mean of suites: seed0 (50+80)/2 = 65, seed1 (70+60)/2 = 65
    assert g["avg_suites_mean"] == pytest.approx(65.0) and g["avg_suites_std"] == pytest.approx(0.0)
    # sample-weighted: seed0 (50*40+80*20)/60 = 60, seed1 (70*40+60*20)/60 = 66.667
    assert g["avg_samples_mean"] == pytest.approx(63.3333, abs=1e-3)
    assert g["avg_samples_std"] == pytest.approx(20 / 3 / math.sqrt(2), abs=1e-3)
    assert k["avg_samples_mean"] == pytest.approx(70.0) and math.isnan(k["avg_samples_std"]) and k["A_n"] == 1
    assert k["delta_avg_samples"] == pytest.approx(70 - 63.3333, abs=1e-3)
    assert k["delta_avg_suites"] == pytest.approx(60 - 65)
    assert g["delta_avg_samples"] == 0
    # kl_cov has one seed: no interval, so nothing is marked better (the highest means alone would be A, avg_samples
    # for kl_cov and B, avg_suites for grpo)
    assert k["best"] == "" and g["best"] == ""
    # grpo's A: 95% t CI half-width = t(0.975, 1) * sqrt(200) / sqrt(2) = 12.7062 * 10
    assert g["A_ci"] == pytest.approx(127.062, abs=1e-2)
    assert list(lb.rows["method"]) == ["grpo", "kl_cov"]  # baseline first


def test_paper_avg_is_the_sample_weighted_mean():
    ref, proto = load_reference("paper"), load_protocol().set_index("suite")
    w = proto.loc[PAPER_SUITES, "eval_rows"].astype(float)
    assert list(w) == [960, 960, 2656, 500, 2821, 675, 272]
    weighted = (ref[PAPER_SUITES] * w.values).sum(axis=1) / w.sum()
    assert (weighted - ref["avg"]).abs().max() <= 0.1  # every row within rounding
    grpo7 = ref[(ref["model"] == "Qwen2.5-7B") & (ref["method"] == "grpo")].iloc[0]
    assert grpo7[PAPER_SUITES].mean() == pytest.approx(39.0857, abs=1e-3)  # the plain mean is NOT the paper's Avg.
    lb = build_leaderboard(None, reference="paper")
    kl32 = lb.rows[(lb.rows["model"] == "Qwen2.5-32B") & (lb.rows["method"] == "kl_cov")].iloc[0]
    assert kl32["delta_avg_samples"] == pytest.approx(6.4) and "avg_samples" in kl32["best"]


def test_missing_run_and_missing_suite_are_not_zero(runs_root, mk, suite):
    _runs(runs_root, mk, suite)
    mk(runs_root, "grpo2", method="grpo", seed=2, write_result=False)
    mk(runs_root, "grpo3", method="grpo", seed=3, suites={"A": suite("A", 0.1, n_problems=10, n_samples=4)})
    lb = build_leaderboard(collect([runs_root]))
    g = _row(lb, "grpo")
    assert g["A_n"] == 3 and g["A_mean"] == pytest.approx((50 + 70 + 10) / 3)
    assert g["B_n"] == 2 and g["avg_samples_n"] == 2  # seed 3 has no B: no average, not a partial one
    assert g["avg_samples_mean"] == pytest.approx(63.3333, abs=1e-3)
    assert any(n.startswith("MISSING: 1 run(s)") and "grpo2 (no result.json)" in n for n in lb.notes)


def test_mixed_protocols_refused_or_flagged(runs_root, mk, suite):
    mk(runs_root, "a", seed=0, suites={"arith": suite("arith", 0.5, n_samples=4)})
    mk(runs_root, "b", seed=1, suites={"arith": suite("arith", 0.7, n_samples=8)})
    with pytest.raises(ValueError, match=r"suite 'arith' was evaluated under 2 different protocols.*n=4.*n=8"):
        build_leaderboard(collect([runs_root]))
    lb = build_leaderboard(collect([runs_root]), allow_mixed_protocols=True)
    assert len([c for c in lb.columns if c.startswith("arith [")]) == 2
    assert any(n.startswith("FLAG: arith has 2 protocols") for n in lb.notes)
    row = lb.rows.iloc[0]
    assert row["arith [avg@4 | problems=100,n=4,T=1.0,top_p=1.0,max_tokens=32]_mean"] == pytest.approx(50.0)


def test_unknown_baseline_names_the_methods(runs_root, mk, suite):
    col = collect([_runs(runs_root, mk, suite)])
    with pytest.raises(ValueError, match="baseline method 'ppo' is not in the table; methods present: grpo, kl_cov"):
        build_leaderboard(col, baseline="ppo")


def test_formats(runs_root, mk, suite):
    lb = build_leaderboard(collect([_runs(runs_root, mk, suite)]), reference="paper")
    md = render(lb, "md")
    # one kl_cov seed: no interval, nothing bold; grpo's CI half-width is t(0.975, 1)·10 = 127.1
    assert "| pocket-1m | kl_cov | run | 90.0 (n=1) |" in md
    assert "| pocket-1m | grpo | run | 60.0 ± 127.1 (n=2) | 70.0 ± 127.1 (n=2) |" in md
    assert "n = 1: one seed per row" not in md  # grpo has two seeds
    assert "paper (reference)" in md and "REFERENCE (paper)" in md
    assert "**" in md.split("paper (reference)", 1)[1]  # the paper's rows keep the paper's bolding
    tex = render(lb, "tex")
    assert r"90.0 (n=1)" in tex and r"60.0 $\pm$ 127.1" in tex and r"kl\_cov" in tex
    assert "<b>90.0 (n=1)</b>" not in render(lb, "html")
    back = pd.read_csv(io.StringIO(render(lb, "csv")))
    kl = back[(back["method"] == "kl_cov") & (back["source"] == "runs")].iloc[0]
    assert kl["avg_samples_mean"] == pytest.approx(70.0) and kl["A_n"] == 1
    with pytest.raises(ValueError, match="unknown table format 'xls'; allowed: md, tex, html, csv"):
        render(lb, "xls")


def test_cli_table(runs_root, mk, suite, capsys, tmp_path):
    assert main(["table", "--reference", "paper"]) == 0
    out = capsys.readouterr().out
    assert "| Qwen2.5-7B | kl_cov | paper (reference) | **22.6** |" in out and "| +2.0 | +2.0 |" in out
    assert main(["table"]) == 2
    assert "error: give run directories" in capsys.readouterr().err
    assert main(["table", str(tmp_path / "nope")]) == 2
    assert "error: no such run directory" in capsys.readouterr().err
    _runs(runs_root, mk, suite)
    dest = tmp_path / "lb.csv"
    assert main(["table", str(runs_root), "--format", "csv", "--out", str(dest)]) == 0
    assert pd.read_csv(dest).shape[0] == 2


def test_reference_flags_runs_evaluated_under_another_protocol(runs_root, mk, suite):
    mk(
        runs_root,
        "a",
        suites={
            "AIME24": suite("AIME24", 0.2, n_problems=30, n_samples=32, temperature=0.6, max_tokens=8192),
            "MATH-500": suite("MATH-500", 0.7, n_problems=500, n_samples=4, temperature=0.6, max_tokens=8192),
        },
    )
    lb = build_leaderboard(collect([runs_root]), reference="paper")
    flags = [n for n in lb.notes if n.startswith("FLAG: runs'")]
    assert len(flags) == 1 and flags[0].startswith("FLAG: runs' math500 protocol (problems=500,n=4,T=0.6")
    run = _row(lb, "grpo")
    assert run["aime24_mean"] == pytest.approx(20.0) and run["math500_mean"] == pytest.approx(70.0)
    # run suites line up with the paper's columns: weights 30*32 and 500*4
    assert run["avg_samples_mean"] == pytest.approx((20 * 960 + 70 * 2000) / 2960)


def test_unreadable_result_json_is_missing(runs_root, mk):
    d = mk(runs_root, "a")
    (d / "result.json").write_text("{not json")
    with pytest.warns(UserWarning, match="result.json: unreadable"):
        col = collect([runs_root])
    assert col.runs.iloc[0]["status"] == "missing" and col.runs.iloc[0]["detail"] == "result.json unreadable"


def test_duplicate_seeds_and_runs_without_eval_are_flagged(runs_root, mk):
    mk(runs_root, "a", seed=0)
    mk(runs_root, "b", seed=0)
    mk(runs_root, "c", seed=1, suites={})
    lb = build_leaderboard(collect([runs_root]))
    assert any(n.startswith("FLAG: pocket-1m grpo has several runs with the same seed") for n in lb.notes)
    assert any(n.startswith("NO EVAL: 1 completed run(s)") and n.endswith("/c") for n in lb.notes)
    assert _row(lb, "grpo")["arith_n"] == 2


def test_cli_prints_corrupt_line_warnings(runs_root, mk, capsys):
    d = mk(runs_root, "a", extra_lines=["{oops"])
    assert main(["table", str(runs_root)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {d / 'metrics.jsonl'}:16: skipped corrupt metrics line" in err


def test_harness_eval_output_is_an_eval_only_row(runs_root, mk, suite):
    import json as _json

    _runs(runs_root, mk, suite)
    base = runs_root / "base"
    base.mkdir()
    (base / "results.json").write_text(
        _json.dumps(
            {
                "model": "pocket-1m",
                "engine": "hf",
                "suites": {
                    "A": suite("A", 0.3, n_problems=10, n_samples=4),
                    "B": suite("B", 0.6, n_problems=20, n_samples=1),
                },
            }
        )
    )
    lb = build_leaderboard(collect([runs_root]))
    row = _row(lb, "eval-only")
    assert row["A_mean"] == pytest.approx(30.0) and row["avg_samples_mean"] == pytest.approx((30 * 40 + 60 * 20) / 60)
    assert row["model"] == "pocket-1m" and _row(lb, "kl_cov")["delta_avg_samples"] == pytest.approx(
        70 - 63.3333, abs=1e-3
    )


def test_a_seed_with_a_null_score_is_named(runs_root, mk, suite):
    """Issue 29 item 12: a seed whose score is null left the row's n smaller with no word about it."""
    mk(runs_root, "g0", method="grpo", seed=0, suites={"A": suite("A", 0.5)})
    mk(runs_root, "g1", method="grpo", seed=1, suites={"A": suite("A", None)})
    mk(runs_root, "g2", method="grpo", seed=2, suites={"A": suite("A", 0.7)})
    lb = build_leaderboard(collect([runs_root]))
    g = _row(lb, "grpo")
    assert g["A_n"] == 2 and g["A_mean"] == pytest.approx(60.0)
    assert any(n.startswith("MISSING: pocket-1m grpo seed 1 has no A score") for n in lb.notes), lb.notes
