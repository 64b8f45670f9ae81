"""The entropy law fit: hand-worked values, recovery from noise, held-out error, size trend, CSV and CLI."""

import json
import math

import numpy as np
import pytest

from harness.cli import main
from harness.results.fit import fit_entropy_law, fit_size_trend

LN = np.log  # H = ln(x) makes exp(H) = x, so the hand arithmetic is in x


def test_exact_law_by_hand():
    f = fit_entropy_law(LN([1, 2, 3]), [1.0, 0.5, 0.0])  # R = 1.5 - 0.5x
    assert (f.a, f.b, f.ceiling, f.r2) == pytest.approx((0.5, 1.5, 1.0, 1.0))


def test_inexact_fit_by_hand():
    # x = 1,2,3; R = 1, .4, .1: slope = -0.9/2 = -0.45, b = 0.5 + 0.45*2 = 1.4
    # fitted .95, .5, .05 -> SS_res = .015, SS_tot = .42, R² = 1 - .015/.42
    f = fit_entropy_law(LN([1, 2, 3]), [1.0, 0.4, 0.1])
    assert f.a == pytest.approx(0.45) and f.b == pytest.approx(1.4) and f.ceiling == pytest.approx(0.95)
    assert f.r2 == pytest.approx(1 - 0.015 / 0.42)
    assert f.rmse == pytest.approx(math.sqrt(0.015 / 3))


def test_recovers_a_b_from_noisy_data():
    rng = np.random.default_rng(0)
    h = rng.uniform(0.05, 1.0, 300)
    r = -0.25 * np.exp(h) + 0.8 + rng.normal(0, 0.02, h.size)
    f = fit_entropy_law(h, r)
    # standard error of a here is ~0.02/(sd(exp H)·sqrt(300)) ≈ 0.0025; tolerance 0.015 is 6 SE
    assert abs(f.a - 0.25) < 0.015 and abs(f.b - 0.8) < 0.015 and abs(f.ceiling - 0.55) < 0.01
    assert abs(f.a_robust - 0.25) < 0.02 and abs(f.b_robust - 0.8) < 0.02
    assert 0.8 < f.r2 < 1.0


def test_robust_check_resists_an_outlier():
    h = LN(np.arange(1, 21, dtype=float))
    r = 2.0 - 0.1 * np.exp(h)
    r[3] += 5.0
    f = fit_entropy_law(h, r)
    assert f.a_robust == pytest.approx(0.1) and f.b_robust == pytest.approx(2.0)
    assert abs(f.a - 0.1) > 0.01  # least squares is pulled by the outlier


def test_fit_fraction_predicts_the_rest():
    # first 3 of 4 points (ceil(0.75*4)) follow R = 1.5 - 0.5x; the 4th (x=4, R=0) is predicted at -0.5
    f = fit_entropy_law(LN([1, 2, 3, 4]), [1.0, 0.5, 0.0, 0.0], fit_fraction=0.75)
    assert f.n_points == 3 and f.n_heldout == 1
    assert f.a == pytest.approx(0.5) and f.rmse_heldout == pytest.approx(0.5)


@pytest.mark.parametrize(
    "h, r, frac, msg",
    [
        ([0.1, 0.2], [0.3, 0.4], None, "need at least 3 points"),
        ([0.5, 0.5, 0.5], [0.1, 0.2, 0.3], None, "all x values are equal"),
        ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], 1.5, r"must be in \(0, 1\)"),
        ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3], 0.99, "leaves nothing to predict"),
        ([0.1, float("nan"), 0.3], [0.1, 0.2, 0.3], None, r"need at least 3 points .* got 2"),
    ],
)
def test_bad_fit_inputs(h, r, frac, msg):
    with pytest.raises(ValueError, match=msg):
        fit_entropy_law(h, r, fit_fraction=frac)


def test_size_trend_is_log_linear():
    sizes = [1e6, 1e7, 1e8]
    a = [0.1 * 6 + 0.2, 0.1 * 7 + 0.2, 0.1 * 8 + 0.2]
    b = [-0.05 * 6 + 1.0, -0.05 * 7 + 1.0, -0.05 * 8 + 1.0]
    t = fit_size_trend(sizes, a, b)
    assert (t.a_slope, t.a_intercept, t.b_slope, t.b_intercept) == pytest.approx((0.1, 0.2, -0.05, 1.0))
    p = t.predict(1e9)
    assert (p["a"], p["b"], p["ceiling"]) == pytest.approx((1.1, 0.55, -0.55))
    with pytest.raises(ValueError, match="at least two different model sizes"):
        fit_size_trend([1e6, 1e6], [1, 2], [1, 2])


def test_cli_fit_runs_json(runs_root, mk, capsys):
    for size, law, name in [(3e5, (0.3, 0.7), "pocket-0.3m"), (1e6, (0.25, 0.8), "pocket-1m")]:
        mk(runs_root, f"{name}-s0", model=name, model_params=size, law=law, steps=30)
    assert (
        main(["fit", str(runs_root), "--by", "model", "--score-key", "reward/mean", "--json", "--predict-size", "1e7"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert {"a", "b", "r2", "ceiling"} <= set(out) and out["score_key"] == "reward/mean"
    fits = {f["label"]: f for f in out["fits"]}
    assert fits["pocket-1m"]["a"] == pytest.approx(0.25) and fits["pocket-1m"]["b"] == pytest.approx(0.8)
    assert fits["pocket-0.3m"]["ceiling"] == pytest.approx(0.4)
    t = out["size_trend"]  # a: 0.3 at log10 5.477, 0.25 at 6 -> slope -0.05/0.5229
    assert t["a_slope"] == pytest.approx(-0.05 / math.log10(1e6 / 3e5))
    assert out["predictions"][0]["a"] == pytest.approx(0.25 + t["a_slope"] * 1.0)


def test_cli_fit_auto_uses_eval_score(runs_root, mk, capsys):
    mk(runs_root, "r", law=(0.25, 0.8), steps=30, eval_every=5)
    assert main(["fit", str(runs_root), "--json", "--fit-fraction", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["score_key"] == "eval/arith/avg@4" and out["n_points"] == 3 and out["n_heldout"] == 3
    assert out["rmse_heldout"] == pytest.approx(0.0, abs=1e-9)


def test_cli_fit_csv_wandb_and_tensorboard(tmp_path, capsys):
    h = np.linspace(1.0, 0.1, 12)
    r = 0.8 - 0.25 * np.exp(h)
    wb = tmp_path / "wandb.csv"
    rows = ["Step,train_entropy/all,val/score-all"]
    rows += [f"{i},{h[i]},{r[i] if i % 2 == 0 else ''}" for i in range(12)]  # score only on even steps
    wb.write_text("\n".join(rows) + "\n")
    assert (
        main(
            [
                "fit",
                "--csv",
                str(wb),
                "--entropy-col",
                "train_entropy/all",
                "--score-col",
                "val/score-all",
                "--json",
                "--fit-fraction",
                "0.5",
            ]
        )
        == 0
    )
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["a"] == pytest.approx(0.25) and out["n_points"] == 3 and out["n_heldout"] == 3
    assert "rmse_heldout" in out
    # the odd steps have no score: said, with the steps (they used to vanish silently; issue 29 item 12)
    assert "note: 6 of 12 rows have no number for 'train_entropy/all' or 'val/score-all'" in cap.err
    assert "(steps 1, 3, 5, 7, 9, 11)" in cap.err
    ent, score = tmp_path / "entropy.csv", tmp_path / "score.csv"
    ent.write_text("Wall time,Step,Value\n" + "".join(f"0,{i},{h[i]}\n" for i in range(12)))
    score.write_text("Wall time,Step,Value\n" + "".join(f"0,{i},{r[i]}\n" for i in range(12)))
    assert (
        main(
            [
                "fit",
                "--csv",
                str(ent),
                "--csv",
                str(score),
                "--entropy-col",
                "entropy/Value",
                "--score-col",
                "score/Value",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert (out["a"], out["b"], out["n_points"]) == pytest.approx((0.25, 0.8, 12))
    assert main(["fit", "--csv", str(wb), "--entropy-col", "entropy", "--score-col", "val/score-all"]) == 2
    assert "--entropy-col 'entropy' is not a column" in capsys.readouterr().err


def test_cli_fit_argument_errors(runs_root, mk, tmp_path, capsys):
    mk(runs_root, "r")
    assert main(["fit"]) == 2
    assert "give either run directories or --csv" in capsys.readouterr().err
    assert main(["fit", str(runs_root), "--score-key", "reward/max"]) == 2
    assert "score key 'reward/max' is not in any metrics.jsonl" in capsys.readouterr().err
    assert main(["fit", str(runs_root), "--predict-size", "1e9"]) == 2
    assert "--predict-size needs law fits for at least two model sizes" in capsys.readouterr().err


def test_scores_pair_with_the_entropy_of_the_same_policy(runs_root, mk):
    from harness.results.collect import collect
    from harness.results.points import run_points

    d = mk(runs_root, "r", steps=4, eval_every=2, h0=1.0, decay=0.5)
    col = collect([d])
    ev = run_points(col, "eval/arith/avg@4").set_index("step")
    # eval at step t (policy after t updates) <-> entropy logged at step t+1; the final eval (4) has no partner
    assert list(ev.index) == [0, 2]
    assert ev.loc[0, "entropy"] == pytest.approx(math.exp(-0.5)) and ev.loc[2, "entropy"] == pytest.approx(
        math.exp(-1.5)
    )
    rw = run_points(col, "reward/mean").set_index("step")
    assert list(rw.index) == [1, 2, 3, 4] and rw.loc[2, "entropy"] == pytest.approx(math.exp(-1.0))


def test_a_fit_against_the_premise_is_flagged():
    assert fit_entropy_law(LN([1, 2, 3]), [1.0, 0.5, 0.0]).warning is None
    f = fit_entropy_law(LN([1, 2, 3]), [0.0, 0.5, 1.0])  # score rises with entropy: a = -0.5
    assert f.a == pytest.approx(-0.5) and f.warning.startswith("a <= 0") and f.to_dict()["warning"] == f.warning


def test_auto_score_key(runs_root, mk):
    from harness.results.collect import collect
    from harness.results.points import resolve_score_key

    curve = mk(runs_root / "a", "curve", steps=10, eval_every=5)  # evals at 0, 5, 10
    final_only = mk(runs_root / "b", "final", steps=10, eval_every=100)  # evals at 0 and 10
    assert resolve_score_key(collect([curve])) == "eval/arith/avg@4"
    assert resolve_score_key(collect([final_only])) == "reward/mean"
    with pytest.raises(ValueError, match="score key 'nope' is not in any metrics.jsonl"):
        resolve_score_key(collect([curve]), "nope")


def test_cli_fit_reports_runs_too_short_to_fit(runs_root, mk, capsys):
    mk(runs_root, "long", steps=20)
    mk(runs_root, "short", steps=2)
    assert main(["fit", str(runs_root), "--score-key", "reward/mean", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert (
        len(out["fits"]) == 1
        and len(out["skipped"]) == 1
        and out["skipped"][0].endswith("need at least 3 points with both entropy and score to fit, got 2")
    )
    assert "skipped " in captured.err and "/short" in captured.err
