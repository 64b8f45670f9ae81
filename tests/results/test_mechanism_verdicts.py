"""Verdicts from intervals (harness.studies.verdicts, the new parts of harness.results.stats and
harness.studies.mechanism): Holm, log-ratio and Fisher-z intervals, the verdict rules, per-run correlations and
predictions, the selected fraction and the archive round trip, each against values worked out by hand.

Student t with 2 degrees of freedom has a closed form, F(t) = 1/2 + t / (2·sqrt(2 + t²)), so three-run intervals
and p-values are computed here without scipy: quantile(q) = a·sqrt(2 / (1 - a²)) with a = 2q - 1, and the
two-sided p of t is 1 - |t| / sqrt(2 + t²)."""

import json
import math

import numpy as np
import pytest

from harness.results import stats
from harness.results.archive import pack, unpacked
from harness.results.collect import collect
from harness.run.metrics import edge_steps
from harness.studies.mechanism import analyse, write_mechanism
from harness.studies.verdicts import BEGIN, END, Check, Claim, decide, main, verdict_of

T975_DF2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))  # 4.3027


def p_df2(t):
    return 1 - abs(t) / math.sqrt(2 + t * t)


def test_holm_on_a_small_p_vector():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4 0.02, x3 0.03, x2 0.06, x1 0.04 -> monotone: 0.02, 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = stats.holm([0.01, math.nan, 0.04])  # a test that could not run is not in the family
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert stats.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_t_test_and_the_df2_closed_form():
    mean, p, n = stats.t_test([1.0, 2.0, 3.0], 0.0)  # t = 2 / (1 / sqrt 3)
    assert (mean, n) == (2.0, 3) and p == pytest.approx(p_df2(2 * math.sqrt(3)))
    assert stats.mean_ci([1.0, 2.0, 3.0]).half == pytest.approx(T975_DF2 / math.sqrt(3))
    assert stats.t_test([0.5, 0.5], 0.5)[1] == 1.0 and stats.t_test([0.5, 0.5], 0.1)[1] == 0.0  # no spread
    assert math.isnan(stats.t_test([0.5], 0.0)[1])


def test_log_ratio_interval_by_hand():
    b = stats.log_ratio_ci([1.0, 2.0, 4.0])  # logs 0, ln2, 2 ln2: mean ln2, sd ln2
    half = T975_DF2 * math.log(2) / math.sqrt(3)
    assert b.estimate == pytest.approx(2.0)  # the geometric mean
    assert b.lo == pytest.approx(math.exp(math.log(2) - half)) and b.hi == pytest.approx(math.exp(math.log(2) + half))
    assert b.lo > 0 and b.p == pytest.approx(p_df2(math.sqrt(3)))  # t of ln2 against log 1 = 0
    paired = stats.paired_log_ratio({0: 2.0, 1: 4.0, 2: 8.0, 3: 1.0}, {0: 2.0, 1: 2.0, 2: 2.0})  # seed 3 unpaired
    assert paired.to_dict() == pytest.approx(b.to_dict(), nan_ok=True)
    tenth = stats.log_ratio_ci([0.01, 0.02, 0.04], null=0.1)  # logs vs log 0.1
    t = (math.log(0.02) - math.log(0.1)) / (math.log(2) / math.sqrt(3))
    assert tenth.p == pytest.approx(p_df2(t)) and tenth.null == 0.1
    with pytest.raises(ValueError, match="positive ratios"):
        stats.log_ratio_ci([1.0, -0.5])


def test_fisher_z_interval_by_hand():
    b = stats.fisher_z_ci([math.tanh(0.1), math.tanh(0.3), math.tanh(0.5)])  # z: mean 0.3, sd 0.2
    half = T975_DF2 * 0.2 / math.sqrt(3)
    assert b.estimate == pytest.approx(math.tanh(0.3))
    assert (b.lo, b.hi) == pytest.approx((math.tanh(0.3 - half), math.tanh(0.3 + half)))
    assert b.p == pytest.approx(p_df2(0.3 / (0.2 / math.sqrt(3))))
    assert stats.fisher_z_ci([1.0, 1.0, 1.0]).estimate == pytest.approx(1.0)  # |r| = 1 is clipped, not inf


def _t(role, est, p, null=0.0, side="above", n=5):
    return Check("t", role, side, est, est - 1, est + 1, n, p, null)


@pytest.mark.parametrize(
    "tests,verdict",
    [
        ([_t("qualitative", 1.0, 0.01), _t("quantitative", 1.0, 0.01)], "reproduces"),
        ([_t("qualitative", 1.0, 0.01), _t("quantitative", -1.0, 0.01)], "partly"),  # size rejected
        ([_t("qualitative", 1.0, 0.01), _t("quantitative", 1.0, 0.2)], "partly"),  # size not established
        ([_t("qualitative", -1.0, 0.01), _t("quantitative", 1.0, 0.01)], "does not"),
        ([_t("qualitative", 1.0, 0.2)], "inconclusive"),
        ([_t("precondition", 1.0, 0.2), _t("qualitative", 1.0, 0.01)], "inconclusive"),
        ([_t("qualitative", 1.0, 0.001, n=2)], "inconclusive"),  # fewer than 3 runs
        ([_t("qualitative", 0.05, 0.001, null=0.1, side="below")], "reproduces"),
        ([_t("qualitative", 0.2, 0.001, null=0.1, side="below")], "does not"),
    ],
)
def test_verdict_rules(tests, verdict):
    for i, t in enumerate(tests):
        t.name = f"t{i}"
    decide([Claim("c", "cell", f"fam{i}", "claim", [t]) for i, t in enumerate(tests)])  # one test per family
    assert verdict_of(tests)[0] == verdict


def test_holm_is_applied_within_a_family_only():
    alone = Claim("a", "x", "solo", "a", [_t("qualitative", 1.0, 0.03)])
    crowded = [Claim("b", str(i), "crowd", "b", [_t("qualitative", 1.0, p)]) for i, p in enumerate((0.03, 0.04, 0.5))]
    v = decide([alone, *crowded])
    assert v["families"] == {"solo": {"size": 1}, "crowd": {"size": 3}}
    by = {(c["family"], c["cell"]): c for c in v["claims"]}
    assert by["solo", "x"]["verdict"] == "reproduces" and by["solo", "x"]["tests"][0]["p_holm"] == pytest.approx(0.03)
    # Holm: 0.03 x 3 = 0.09, 0.04 x 2 = 0.08 -> 0.09 (monotone), 0.5: none passes at 0.05
    assert [by["crowd", str(i)]["tests"][0]["p_holm"] for i in range(3)] == pytest.approx([0.09, 0.09, 0.5])
    assert {by["crowd", str(i)]["verdict"] for i in range(3)} == {"inconclusive"}


A, B, STEPS = 0.3, 0.9, 30


def _grpo(mk, root, decays, h0=1.0, method="grpo"):
    for s, d in enumerate(decays):
        mk(root, f"{method}{s}", method=method, seed=s, steps=STEPS, law=(A, B), h0=h0, decay=d, eval_every=3)


def _claim(res, claim, cell="pocket-1m"):
    return next(c for c in res["verdicts"]["claims"] if c["claim"] == claim and c["cell"] == cell)


def test_collapse_verdict_from_the_log_ratio(runs_root, mk):
    """h = exp(-d·t): the mean of the last w steps over the first w is exp(-(T - w)·d) exactly; w = edge_steps(30)
    = 3 (harness/run/metrics.py), so the log ratios are -27·d: -6.75, -7.02, -7.29 (mean -7.02, sd 0.27)."""
    _grpo(mk, runs_root, (0.25, 0.26, 0.27))
    res = analyse(collect([runs_root]))
    c = _claim(res, "collapse")
    ratio = c["tests"][0]
    span = STEPS - edge_steps(STEPS)
    assert span == 27
    mean, sd = -span * 0.26, span * 0.01
    half = T975_DF2 * sd / math.sqrt(3)
    assert ratio["estimate"] == pytest.approx(math.exp(mean))
    assert (ratio["lo"], ratio["hi"]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert ratio["p"] == pytest.approx(p_df2((mean - math.log(0.1)) / (sd / math.sqrt(3))))
    assert ratio["family_size"] == 2 and ratio["p_holm"] == pytest.approx(
        stats.holm([ratio["p"], c["tests"][1]["p"]])[0]
    )
    assert ratio["outcome"] == "pass" and c["verdict"] in ("reproduces", "partly")
    assert res["verdicts"]["families"]["collapse"] == {"size": 2}


def test_no_collapse_is_does_not(runs_root, mk):
    _grpo(mk, runs_root, (0.05, 0.052, 0.054))  # end/start exp(-1.3) = 0.27
    c = _claim(analyse(collect([runs_root])), "collapse")
    assert c["tests"][0]["outcome"] == "fail" and c["verdict"] == "does not"


def test_rescue_ratio_is_a_log_scale_paired_ratio(runs_root, mk):
    _grpo(mk, runs_root, (0.05, 0.06, 0.07))
    _grpo(mk, runs_root, (0.05, 0.06, 0.07), h0=2.0, method="kl_cov")
    res = analyse(collect([runs_root]))
    c = _claim(res, "rescue_entropy", "kl_cov pocket-1m")
    assert c["tests"][0]["estimate"] == pytest.approx(2.0) and c["verdict"] == "reproduces"
    lr = res["methods"]["kl_cov"]["pocket-1m"]["entropy_end_vs_grpo_log"]
    assert lr["estimate"] == pytest.approx(2.0) and lr["lo"] == pytest.approx(2.0)
    assert res["verdicts"]["families"]["rescue"] == {"size": 2}  # entropy and score of one method and size


def test_per_run_prediction_and_law_fit(runs_root, mk):
    """Every eval lies on the law: each run's own fit and its first-third fit are exact; the final eval scores
    the policy after 30 updates (entropy h(31)) while the prediction reads the last logged entropy h(30)."""
    _grpo(mk, runs_root, (0.05, 0.05, 0.05))
    res = analyse(collect([runs_root]))
    per = res["sizes"]["pocket-1m"]["per_run"]
    h = lambda t: math.exp(-0.05 * t)  # noqa: E731
    assert per["law_a"]["mean"] == pytest.approx(A) and per["law_r2"]["mean"] == pytest.approx(1.0)
    assert per["prediction_abs_error"]["mean"] == pytest.approx(A * (math.exp(h(30)) - math.exp(h(31))))
    assert per["early_points"]["mean"] == 4  # evals at steps 0, 3, 6, 9 <= T/3 = 10
    score = lambda t: -A * math.exp(h(t + 1)) + B  # noqa: E731
    at_third = score(9) + (score(12) - score(9)) / 3
    assert per["naive_abs_error"]["mean"] == pytest.approx(abs(score(30) - at_third))
    c = _claim(res, "law_fit")
    assert c["verdict"] == "reproduces" and c["tests"][0]["estimate"] == pytest.approx(A)


def _rewrite(d, edit):
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for t, r in enumerate(rows):
        edit(t, r)
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_correlations_are_per_run_with_a_fisher_z_interval(runs_root, mk):
    """Run i: cov = x, ΔH = cos(θ_i)·x + sin(θ_i)·y with x, y orthogonal, zero-mean and of equal norm, so its r is
    exactly cos(θ_i); the summary is tanh of the mean atanh r with a t interval over the three runs."""
    rs = (-0.2, -0.5, -0.8)
    n = 20
    t = np.arange(n)
    x = np.cos(2 * np.pi * t / n)
    y = np.sin(2 * np.pi * t / n)  # orthogonal to x over a full period, both mean 0, same norm
    for s, r in enumerate(rs):
        d = mk(runs_root, f"grpo{s}", seed=s, steps=n)
        dh = r * x + math.sqrt(1 - r * r) * y

        def put(i, row, dh=dh):
            row["cov/term"], row["cov/vanilla"] = float(x[i]), float(-x[i])
            row["entropy/update_delta"] = float(dh[i])

        _rewrite(d, put)
    per = analyse(collect([runs_root]))["cov_vs_entropy_change"]["per_run"]["grpo"]
    z = np.arctanh(rs)
    half = T975_DF2 * z.std(ddof=1) / math.sqrt(3)
    assert per["cov/term"]["r"]["estimate"] == pytest.approx(math.tanh(z.mean()))
    assert per["cov/term"]["r"]["lo"] == pytest.approx(math.tanh(z.mean() - half))
    assert per["cov/vanilla"]["r"]["estimate"] == pytest.approx(-math.tanh(z.mean()))  # its own column
    assert per["cov/term"]["slope"]["mean"] == pytest.approx(np.mean(rs))  # slope = r: equal norms
    assert per["cov/term"]["n_runs"] == 3 and "cov/first_order" not in per


def test_effective_selected_fraction_beside_the_nominal_one(runs_root, mk):
    for s, frac in enumerate((0.02, 0.03, 0.04)):
        d = mk(runs_root, f"kl{s}", method="kl_cov", seed=s, method_config={"k_ratio": 0.002, "scope": "global"})
        _rewrite(d, lambda t, r, frac=frac: r.update({"selected/frac": frac, "selected/count": 1.0}))
    for s in range(3):
        mk(runs_root, f"grpo{s}", seed=s)
    sel = analyse(collect([runs_root]))["selection"]
    assert list(sel) == ["kl_cov"]
    cell = sel["kl_cov"]["pocket-1m"]
    assert (cell["nominal"], cell["hparam"], cell["scope"]) == (0.002, "k_ratio", "global")
    assert cell["effective"]["mean"] == pytest.approx(0.03) and cell["count_per_step"]["mean"] == 1.0


def test_archives_are_read_like_run_directories(runs_root, mk, tmp_path):
    _grpo(mk, runs_root, (0.25, 0.26, 0.27))
    write_mechanism(runs_root, tmp_path / "from_dirs", formats=())
    (runs_root / "grpo0" / "checkpoints").mkdir()
    (runs_root / "grpo0" / "checkpoints" / "latest.pt").write_bytes(b"x" * 1000)  # not archived
    store = tmp_path / "store"
    assert pack(runs_root, store / "lab.tar.xz") == 3
    first = (store / "lab.tar.xz").read_bytes()
    assert pack(runs_root, store / "lab.tar.xz") == 3 and (store / "lab.tar.xz").read_bytes() == first  # same bytes
    with unpacked(store) as folder:
        names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert "lab/grpo0/metrics.jsonl" in names and not any("checkpoints" in n for n in names)
    assert not folder.exists()  # removed afterwards
    write_mechanism(store, tmp_path / "from_archive", formats=())
    a = (tmp_path / "from_dirs" / "mechanism.json").read_text()
    assert (tmp_path / "from_archive" / "mechanism.json").read_text() == a
    with pytest.raises(ValueError, match="no run directory"):
        pack(tmp_path / "store", tmp_path / "x.tar.xz")


def test_the_table_generator_writes_markdown_and_fills_the_docs(runs_root, mk, tmp_path, capsys):
    _grpo(mk, runs_root, (0.25, 0.26, 0.27))
    write_mechanism(runs_root, tmp_path / "o", formats=())
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nold table\n{END}\nrest\n")
    js = tmp_path / "o" / "mechanism.json"
    assert main([f"Lab={js}", "--out", str(tmp_path / "v.md"), "--docs", str(doc)]) == 0
    table = (tmp_path / "v.md").read_text()
    assert table.startswith("**Lab** (α = 0.05 per family after Holm; family sizes: collapse m=2")
    assert "| grpo entropy collapses; held-out score flat late | pocket-1m |" in table
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\nrest\n") and "old table" not in text
    assert table.strip() in text
    (tmp_path / "bad.md").write_text("no markers\n")
    assert main([str(js), "--out", str(tmp_path / "w.md"), "--docs", str(tmp_path / "bad.md")]) == 2
    assert "needs the markers" in capsys.readouterr().err
    (tmp_path / "old.json").write_text("{}")
    assert main([str(tmp_path / "old.json"), "--out", str(tmp_path / "w.md")]) == 2
    assert "no 'verdicts' block" in capsys.readouterr().err
