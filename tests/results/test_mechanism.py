"""`harness mechanism` on synthetic runs with known answers: the law's a, b; early fractions and the entropy
ratio worked out by hand; a covariance series with a known (exact) relation to the entropy change; the paired
rescue ratio; clear errors for bad or partial runs directories."""

import copy
import json
import math

import numpy as np
import pytest

from harness.cli import main
from harness.results.collect import collect
from harness.run.metrics import edge_steps
from harness.studies.mechanism import analyse

A, B, H0, DECAY, STEPS = 0.3, 0.9, 1.0, 0.05, 30
WINDOW = edge_steps(STEPS)  # the start / end window of a 30-step run: 3 steps (harness/run/metrics.py)


def _h(t, h0=H0):
    return h0 * math.exp(-DECAY * t)


def _family(root, mk, methods=("grpo", "rloo", "prime"), seeds=(0, 1, 2), **kw):
    for m in methods:
        for s in seeds:
            mk(
                root,
                f"{m}{s}",
                method=m,
                advantage=m if m in ("rloo", "prime") else "grpo",
                seed=s,
                steps=STEPS,
                law=(A, B),
                h0=kw.get("h0", {}).get(m, H0),
                decay=DECAY,
                eval_every=3,
            )


def test_law_early_fraction_ratio_and_prediction_by_hand(runs_root, mk):
    _family(runs_root, mk)
    res = analyse(collect([runs_root]))
    size = res["sizes"]["pocket-1m"]
    # every eval lies on R = -A exp(H) + B, so the pooled fit and each algorithm's fit recover A and B
    assert size["law"]["a"] == pytest.approx(A) and size["law"]["b"] == pytest.approx(B)
    assert size["law"]["r2"] == pytest.approx(1.0) and size["law"]["n"] == 3 * 3 * (STEPS // 3)  # step 0..27
    for alg in ("grpo", "rloo", "prime"):
        assert size["law_by_algorithm"][alg]["a"] == pytest.approx(A)
        assert size["law_by_algorithm"][alg]["rmse_pooled"] == pytest.approx(0.0, abs=1e-9)
    steps = np.arange(1, STEPS + 1)
    h = H0 * np.exp(-DECAY * steps)
    start, end, third = h[:WINDOW].mean(), h[-WINDOW:].mean(), h[STEPS // 3 - WINDOW : STEPS // 3].mean()
    assert size["grpo_entropy_ratio"]["mean"] == pytest.approx(end / start)
    assert size["grpo_entropy_ratio"]["ci95"] == pytest.approx(0.0, abs=1e-12)  # identical seeds
    assert size["early_fraction"]["entropy_drop"]["mean"] == pytest.approx((start - third) / (start - end))
    score = lambda t: -A * math.exp(_h(t + 1)) + B  # noqa: E731  (eval at t scores the policy after t updates)
    at_third = score(9) + (score(12) - score(9)) / 3  # evals every 3 steps: linear interpolation at T/3 = 10
    gain = (at_third - score(0)) / (score(30) - score(0))
    assert size["early_fraction"]["gain"]["mean"] == pytest.approx(gain)
    at_two_thirds = score(18) + (score(21) - score(18)) * 2 / 3
    late = (score(30) - at_two_thirds) / (score(30) - score(0))
    assert size["late_gain_fraction"]["mean"] == pytest.approx(late)
    assert size["late_gain"]["mean"] == pytest.approx(score(30) - at_two_thirds)
    assert size["total_gain"]["mean"] == pytest.approx(score(30) - score(0))
    assert size["collapsed"] is False and end / start > 0.1  # 30 steps of this decay do not collapse
    # the early fit is exact too; the final eval (after 30 updates) is predicted from the step-30 entropy
    assert size["prediction_rmse"] == pytest.approx(A * (math.exp(_h(30)) - math.exp(_h(31))))
    assert size["final_score_sd"] == pytest.approx(0.0, abs=1e-12)  # nine identical curves
    assert res["steps"] == STEPS and res["seeds"] == 3
    assert size["model_params"] == 1_000_000  # an integer column (every run finished) is read too


def test_rescue_is_a_paired_ratio_and_difference(runs_root, mk):
    _family(runs_root, mk, methods=("grpo", "kl_cov"), h0={"kl_cov": 2 * H0})
    res = analyse(collect([runs_root]))
    kl = res["methods"]["kl_cov"]["pocket-1m"]
    assert kl["entropy_end_vs_grpo"]["mean"] == pytest.approx(2.0) and kl["entropy_end_vs_grpo"]["n"] == 3
    expected = (-A * math.exp(_h(31, 2 * H0)) + B) - (-A * math.exp(_h(31)) + B)
    assert kl["score_delta_vs_grpo"]["mean"] == pytest.approx(expected)


def test_covariance_with_a_known_relation_to_the_entropy_change(runs_root, mk):
    """cov/term at step t is set to -(H[t+1] - H[t]) / eta + noise with a known correlation."""
    eta = 0.5
    rng = np.random.default_rng(0)
    for s in range(2):
        d = mk(runs_root, f"grpo{s}", seed=s, steps=STEPS)
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for t, r in enumerate(rows[:-1]):
            r["cov/term"] = -(rows[t + 1]["entropy"] - r["entropy"]) / eta
        rows[-1]["cov/term"] = None
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = analyse(collect([runs_root]))["cov_vs_entropy_change"]
    assert res["pearson_r"] == pytest.approx(-1.0) and res["slope"] == pytest.approx(-eta)
    assert res["n"] == 2 * (STEPS - 1)
    # with noise: r equals the correlation of the series written
    for d in runs_root.iterdir():
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for r in rows[:-1]:
            r["cov/term"] += 0.05 * rng.standard_normal()
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    col = collect([runs_root])
    m = col.metrics.sort_values(["run_dir", "step"])
    dh = m.groupby("run_dir")["entropy"].shift(-1) - m["entropy"]
    ok = dh.notna()
    want = np.corrcoef(m["cov/term"][ok], dh[ok])[0, 1]
    assert -0.99 < want < -0.2
    assert analyse(col)["cov_vs_entropy_change"]["pearson_r"] == pytest.approx(want)


def _rewrite(d, edit):
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    for t, r in enumerate(rows):
        edit(t, r)
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_generated_entropy_is_used_when_every_run_logs_it(runs_root, mk, tmp_path, capsys):
    """The runs' true entropy (on the law) goes to ``entropy/generated``; ``entropy`` (the filtered batch's) is
    doubled. Auto must analyse the generated key: the law and the ratio come out as if ``entropy`` were exact."""
    _family(runs_root, mk, methods=("grpo",), seeds=(0, 1))

    def move(t, r):
        r["entropy/generated"], r["entropy"] = r["entropy"], 2 * r["entropy"]

    for d in runs_root.iterdir():
        _rewrite(d, move)
    res = analyse(collect([runs_root]))
    size = res["sizes"]["pocket-1m"]
    assert res["entropy_key"] == "entropy/generated" and res["delta_key"] is None
    assert size["law"]["a"] == pytest.approx(A) and size["law"]["b"] == pytest.approx(B)
    h = H0 * np.exp(-DECAY * np.arange(1, STEPS + 1))
    assert size["grpo_entropy_ratio"]["mean"] == pytest.approx(h[-WINDOW:].mean() / h[:WINDOW].mean())
    assert analyse(collect([runs_root]), entropy_key="entropy")["sizes"]["pocket-1m"]["law"]["r2"] < 1 - 1e-6
    # one run without the generated key: auto falls back to `entropy` for all runs
    _rewrite(next(runs_root.iterdir()), lambda t, r: r.pop("entropy/generated"))
    assert analyse(collect([runs_root]))["entropy_key"] == "entropy"
    assert main(["mechanism", str(runs_root), "--out", str(tmp_path / "o"), "--entropy-key", "entropy/generated"]) != 0
    err = capsys.readouterr().err
    assert "entropy key 'entropy/generated' is not logged by every completed run" in err and "entropy/delta" in err


def test_update_delta_is_the_entropy_change_when_logged(runs_root, mk):
    """``entropy/update_delta`` (same batch, this step's update) is paired with the same step's cov/term:
    cov = -ΔH/eta exactly gives r = -1 and slope -eta on every step (none lost to pairing consecutive steps)."""
    eta = 0.25
    rng = np.random.default_rng(3)
    for s in range(2):
        d = mk(runs_root, f"grpo{s}", seed=s, steps=STEPS)

        def put(t, r):
            r["entropy/update_delta"] = float(rng.normal(-0.01, 0.02))
            r["cov/term"] = -r["entropy/update_delta"] / eta

        _rewrite(d, put)
    res = analyse(collect([runs_root]))
    assert res["delta_key"] == "entropy/update_delta"
    c = res["cov_vs_entropy_change"]
    assert c["pearson_r"] == pytest.approx(-1.0) and c["slope"] == pytest.approx(-eta) and c["n"] == 2 * STEPS
    assert c["block_steps"] == 1 and c["block_r"] == pytest.approx(-1.0)  # 30 steps: blocks of one step
    g = c["by_method"]["grpo"]
    assert g["mean_cov"] == pytest.approx(-g["mean_delta_h"] / eta) and g["mean_delta_h"] < 0


def test_partial_r_removes_a_shared_dependence_on_the_entropy(runs_root, mk):
    """cov = -H + e1 and ΔH = -0.5·H - eta·e1 + e2: the raw r is positive (both fall with H) while the relation
    the theorem describes, given H, is r = -eta·s1 / sqrt(eta²·s1² + s2²); the partial r recovers it."""
    eta, s1, s2 = 0.5, 0.05, 0.02
    rng = np.random.default_rng(7)
    for s in range(3):
        d = mk(runs_root, f"grpo{s}", seed=s, steps=200)

        def put(t, r):
            r["entropy"] = float(rng.uniform(0.1, 1.0))
            e1 = float(rng.normal(0, s1))
            r["cov/term"] = -r["entropy"] + e1
            r["entropy/update_delta"] = -0.5 * r["entropy"] - eta * e1 + float(rng.normal(0, s2))

        _rewrite(d, put)
    c = analyse(collect([runs_root]))["cov_vs_entropy_change"]
    assert c["pearson_r"] > 0.9
    assert c["partial_r_given_entropy"] == pytest.approx(-eta * s1 / math.hypot(eta * s1, s2), abs=0.05)
    assert c["by_method"]["grpo"]["partial_r_given_entropy"] == pytest.approx(c["partial_r_given_entropy"])
    assert len(c["by_quarter"]) == 4 and all(r > 0.9 for r in c["by_quarter"])
    assert c["block_steps"] == 10 and c["block_r"] > 0.9  # block means keep the shared H, average the noise out


def test_cli_writes_json_and_figures(runs_root, mk, tmp_path, capsys):
    _family(runs_root, mk, methods=("grpo", "kl_cov"), seeds=(0, 1))
    assert main(["mechanism", str(runs_root), "--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "mechanism.json").read_text())
    assert set(res) >= {"sizes", "methods", "cov_vs_entropy_change", "seeds", "steps", "size_trend"}
    assert (tmp_path / "out" / "mechanism_entropy.png").is_file() and (tmp_path / "out" / "mechanism_law.png").is_file()
    assert (tmp_path / "out" / "mechanism_rescue.png").is_file() and (tmp_path / "out" / "mechanism_cov.png").is_file()
    assert not (tmp_path / "out" / "entropy_change_vs_cov.png").exists()  # harness report's figure keeps its name


@pytest.mark.parametrize(
    "case,match",
    [
        ("missing", "no such runs directory"),
        ("empty", "no run directories under"),
        ("partial", "no completed run to analyse"),
        ("no_baseline", "baseline method 'grpo' has no completed run; methods present: kl_cov"),
        ("mixed_steps", "differ in settings that change what they measure"),
    ],
)
def test_bad_runs_dirs_give_one_error_line(runs_root, mk, tmp_path, capsys, case, match):
    root = tmp_path / "nowhere"
    if case == "empty":
        root.mkdir()
    elif case == "partial":
        mk(runs_root, "grpo0", write_result=False)
        root = runs_root
    elif case == "no_baseline":
        mk(runs_root, "kl0", method="kl_cov")
        root = runs_root
    elif case == "mixed_steps":
        for i, st in enumerate((50, 100)):
            d = mk(runs_root, f"grpo{i}", seed=i)
            (d / "config.yaml").write_text((d / "config.yaml").read_text() + f"train: {{steps: {st}}}\n")
        root = runs_root
    assert main(["mechanism", str(root), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and match in err[-1]
    assert not (tmp_path / "out" / "mechanism.json").exists()


def test_a_fast_collapse_meets_the_collapse_criterion(runs_root, mk):
    for s in range(2):
        mk(runs_root, f"grpo{s}", seed=s, steps=STEPS, law=(A, B), decay=0.25, eval_every=3)
    size = analyse(collect([runs_root]))["sizes"]["pocket-1m"]
    steps = np.arange(1, STEPS + 1)
    h = np.exp(-0.25 * steps)
    assert size["grpo_entropy_ratio"]["mean"] == pytest.approx(h[-WINDOW:].mean() / h[:WINDOW].mean())
    assert size["grpo_entropy_ratio"]["mean"] < 0.1 and size["late_gain_fraction"]["mean"] < 0.1
    assert size["late_gain"]["mean"] < 0.1 * size["total_gain"]["mean"]
    assert size["collapsed"] is True


def test_flatness_compares_seed_means_not_per_seed_ratios(runs_root, mk):
    """A seed that ends below its start has a negative total gain: its late/total ratio flips sign and explodes.
    The criterion compares the seed means of the gains instead (hand-computed from the fixture's evals)."""
    for s, h0 in enumerate((1.0, 1.0, 0.02)):  # seed 2 starts collapsed: total gain ~ 0
        d = mk(runs_root, f"grpo{s}", seed=s, steps=STEPS, law=(A, B), h0=h0, decay=0.25, eval_every=3)
        if s == 2:  # its final eval drops below the start
            ev = json.loads((d / "eval" / f"step_{STEPS}.json").read_text())
            first = json.loads((d / "eval" / "step_0.json").read_text())["suites"]["arith"]["metrics"]["avg@4"]
            ev["suites"]["arith"]["metrics"]["avg@4"] = first - 0.001
            (d / "eval" / f"step_{STEPS}.json").write_text(json.dumps(ev))
            low = first - 0.001
            _rewrite(d, lambda t, r, low=low: r.update({"eval/arith/avg@4": low}) if t == STEPS - 1 else None)
    size = analyse(collect([runs_root]))["sizes"]["pocket-1m"]
    runs = {r["seed"]: r for r in analyse(collect([runs_root]))["runs"]}
    late = [runs[s]["s_end"] - runs[s]["s_two_thirds"] for s in range(3)]
    total = [runs[s]["s_end"] - runs[s]["s_first"] for s in range(3)]
    assert total[2] < 0 and late[2] / total[2] > 1  # "more than all of the gain came late": meaningless
    assert size["late_gain"]["mean"] == pytest.approx(np.mean(late))
    assert size["total_gain"]["mean"] == pytest.approx(np.mean(total))
    assert np.mean(late) < 0.1 * np.mean(total) and size["collapsed"] is True


def test_summary_markdown_is_written_beside_the_json(runs_root, mk, tmp_path):
    _family(runs_root, mk, methods=("grpo", "kl_cov"), h0={"kl_cov": 2 * H0})
    assert main(["mechanism", str(runs_root), "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "mechanism.md").read_text()
    assert "| kl_cov | pocket-1m | 2.00 [2.00, 2.00] (n=3) |" in md and f"harness mechanism {runs_root}" in md


def test_law_family_option(runs_root, mk, tmp_path, capsys):
    _family(runs_root, mk, methods=("grpo", "rloo"), seeds=(0, 1))
    assert main(["mechanism", str(runs_root), "--out", str(tmp_path / "o"), "--law-family", "grpo"]) == 0
    res = json.loads((tmp_path / "o" / "mechanism.json").read_text())
    assert res["law_family"] == ["grpo"] and list(res["sizes"]["pocket-1m"]["law_by_algorithm"]) == ["grpo"]
    assert "--law-family grpo`" in (tmp_path / "o" / "mechanism.md").read_text()
    assert main(["mechanism", str(runs_root), "--out", str(tmp_path / "p"), "--law-family", "grpo,prime"]) != 0
    assert "law family method(s) prime have no completed run" in capsys.readouterr().err


def _pocket_run(tiny, tmp_path, name, lr):
    """The shared tiny run on pocket-0.1m with an entropy bonus on ordered countdown (one answer per problem)."""
    from harness.run.config import load_config
    from harness.run.runner import run

    tiny["method"] = {"name": "entropy_bonus", "coef": 1.0}
    tiny["model"]["name"] = "pocket-0.1m"
    tiny["task"]["options"] = {"n_numbers": 2, "max_number": 9, "ordered": True}
    tiny["train"]["lr"] = lr
    tiny["eval"] = {"every": 0, "n_samples": 1, "max_problems": 4}
    run(load_config(tiny), tmp_path / name, quiet=True)
    return tmp_path / name


def test_probe_compares_the_start_model_with_the_last_checkpoint(tiny, tmp_path):
    from harness.studies.probe import probe_run, probe_runs

    frozen = probe_run(_pocket_run(copy.deepcopy(tiny), tmp_path, "frozen", 1e-30), n_prompts=16, n_samples=2)
    # lr 1e-30 (lr 0 is refused at load): no AdamW step moves a float32 weight, so the last checkpoint holds the
    # start model and the probe must read the same entropy and accuracy
    assert frozen["step"] == 3 and frozen["h_start"] > 0.5  # no warm start: a fresh model is far from certain
    assert frozen["h_end"] == pytest.approx(frozen["h_start"], rel=1e-5) and frozen["acc_end"] == frozen["acc_start"]
    groups = frozen["end_by_group"]
    assert sum(g["prompts"] for g in groups.values()) == 16
    assert sum(g["entropy_share"] for g in groups.values()) == pytest.approx(1.0)
    assert frozen["acc_end"] == 0.0  # a fresh model never writes the one accepted answer: every prompt unsolved
    assert groups["unsolved"] == {
        "prompts": 16,
        "entropy_per_token": pytest.approx(groups["unsolved"]["entropy_per_token"]),
        "entropy_share": pytest.approx(1.0),
    }
    assert groups["solved"]["entropy_per_token"] is None and groups["solved"]["entropy_share"] == 0.0
    assert frozen["decision_ratio"] == pytest.approx(1.0, rel=1e-5)  # same weights: same decision entropy
    assert 0 < frozen["decision_start"]["tokens_per_response"] < 1
    moved = probe_run(_pocket_run(tiny, tmp_path, "moved", 1e-2), n_prompts=16, n_samples=2)
    assert moved["h_start"] == pytest.approx(frozen["h_start"], rel=1e-5)  # same seed: same start model
    assert moved["h_end"] > moved["h_start"] + 1e-3  # a fresh model earns no reward; the entropy bonus moves it
    res = probe_runs(tmp_path, method="entropy_bonus", n_prompts=16, n_samples=2)
    assert sorted(r["ratio"] for r in res["runs"]) == pytest.approx(sorted([1.0, moved["ratio"]]), rel=1e-5)
    assert res["sizes"]["pocket-0.1m"]["ratio"]["n"] == 2
    with pytest.raises(ValueError, match="no completed 'grpo' run to probe"):
        probe_runs(tmp_path)
    (tmp_path / "moved" / "checkpoints" / "latest.pt").unlink()
    with pytest.raises(ValueError, match="needs result.json and checkpoints/latest.pt"):
        probe_run(tmp_path / "moved")


def test_decision_positions_by_hand():
    from harness.backends.pocket.tasks import make_task

    ordered = make_task("countdown", 16, {"n_numbers": 2, "max_number": 9, "ordered": True})
    unordered = make_task("countdown", 16, {"n_numbers": 3, "max_number": 9})
    assert ordered.decision_positions("5-3") == [1]  # the numbers are copied: only the operator is a choice
    assert unordered.decision_positions("3*5+7") == [0, 1, 2, 3, 4]
    assert unordered.decision_positions("12+(3*4)") == [0, 2, 4, 5, 6]  # '2' continues a number, '(' is syntax


def test_decision_entropy_is_the_mean_over_decision_tokens(tmp_path):
    """Two responses '5-3<eos>' and '7*2<eos>' of the ordered task: the decision tokens are '-' and '*', so the
    decision entropy is the mean of their two entropies; 2 of 8 response tokens are decisions."""
    import torch

    from harness.backends.pocket.generate import Batch
    from harness.backends.pocket.tasks import make_task
    from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
    from harness.studies.probe import _decision_entropy

    tok = TokenizerAdapter(build_char_tokenizer())
    rows = [tok.encode_answer("5-3"), tok.encode_answer("7*2")]
    resp = torch.tensor(rows)
    ent = torch.tensor([[0.1, 0.8, 0.2, 0.05], [0.3, 0.4, 0.1, 0.0]])
    batch = Batch(resp, torch.ones_like(resp), 0, resp, torch.ones(resp.shape), None, ent)
    task = make_task("countdown", 16, {"n_numbers": 2, "max_number": 9, "ordered": True})
    sampler = type("Sampler", (), {"task": task, "decode": staticmethod(tok.decode)})()  # the policy sampler's view
    out = _decision_entropy(sampler, batch)
    assert out["entropy"] == pytest.approx((0.8 + 0.4) / 2) and out["tokens_per_response"] == pytest.approx(2 / 8)
