"""The rescue study's analysis (harness.studies.rescue, docs/rescue_prereg.md) on synthetic runs with values chosen
so that each verdict is known by hand, and the registered table of plain answers row by row."""

import json
import math

import pytest
import yaml

from harness.studies.rescue import ARMS, MIN_SEEDS, analyse, arm_of, plain_answer, write

GRPO_H = {0: 0.02, 1: 0.03, 2: 0.04, 3: 0.05}
# end entropy of each arm relative to GRPO's, per seed
RATIO = {
    "grpo": [1, 1, 1, 1],
    "clip_cov": [1.0, 1.0, 1.0, 1.0],
    "kl_cov": [2, 2, 2, 2],
    "kl_cov_exact": [1.1, 0.9, 1, 1],
}


def write_run(root, arm, seed, h_end, score, status="completed"):
    d = root / f"{arm}__s{seed}"
    (d / "eval").mkdir(parents=True)
    method = {"name": arm.removesuffix("_exact")}
    train = {"old_log_probs": "recompute"} if arm.endswith("_exact") else {}
    (d / "config.yaml").write_text(yaml.safe_dump({"method": method, "train": train, "seed": seed}))
    rows = [{"step": i + 1, "entropy/generated": 0.5 if i < 5 else h_end} for i in range(20)]
    if arm.startswith("kl_cov"):  # the descriptive noise measures (amendment 1's metric keys), rollout arm only
        noisy = not arm.endswith("_exact")
        for r in rows:
            r.update({"selected/below_floor": 3.0 * noisy, "selected/count": 8.0, "penalty/grad_norm": 0.5 * noisy})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = {"countdown": {"metrics": {"avg@4": score}, "primary": "avg@4"}}
    (d / "eval" / "step_10.json").write_text(json.dumps({"step": 10, "suites": {"countdown": {**suite["countdown"]}}}))
    (d / "eval" / "step_20.json").write_text(json.dumps({"step": 20, "suites": suite}))
    (d / "result.json").write_text(json.dumps({"seed": seed, "status": status}))


@pytest.fixture
def study(tmp_path):
    for arm in ARMS:
        for seed, h in GRPO_H.items():
            write_run(tmp_path, arm, seed, h * RATIO[arm][seed], 0.5)
    return tmp_path


def test_arms_come_from_the_config():
    assert arm_of({"method": {"name": "kl_cov"}, "train": {"old_log_probs": "recompute"}}) == "kl_cov_exact"
    assert arm_of({"method": {"name": "kl_cov"}, "train": {}}) == "kl_cov"
    with pytest.raises(ValueError, match="no arm"):
        arm_of({"method": {"name": "rloo"}, "train": {}})


def test_verdicts_by_hand(study):
    res = analyse(study)
    claims = {c["claim"]: c for c in res["verdicts"]["claims"]}
    assert res["seeds"] == [0, 1, 2, 3] and res["excluded"] == []
    e1 = claims["E1"]["tests"][0]  # ratio 2 in every seed: no spread, p = 0
    assert e1["estimate"] == pytest.approx(2.0) and claims["E1"]["verdict"] == "reproduces"
    e2 = claims["E2"]["tests"][0]  # log ratios ln 1.1, ln 0.9, 0, 0: geometric mean 0.99 ** (1/4)
    assert e2["estimate"] == pytest.approx(0.99**0.25)
    logs = [math.log(1.1), math.log(0.9), 0.0, 0.0]
    m = sum(logs) / 4
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 3)
    assert e2["hi"] == pytest.approx(math.exp(m + 3.182446305 * sd / 2))  # t(0.975, 3) * sd / sqrt(4)
    assert claims["E2"]["verdict"] == "inconclusive"
    assert claims["E3"]["tests"][0]["estimate"] == pytest.approx((0.55 * 0.45 * 0.5 * 0.5) ** 0.25)
    assert claims["E3"]["verdict"] == "reproduces"  # exact / rollout = 0.55, 0.45, 0.5, 0.5: all below 1
    assert claims["E4"]["verdict"] == "inconclusive"  # identical to GRPO: p = 1
    assert res["verdicts"]["families"] == {"entropy": {"size": 4}, "score": {"size": 3}}
    assert res["answer"].startswith("yes:")


def test_a_failed_run_excludes_its_seed_and_max_seeds_cuts_in_order(study):
    (study / "clip_cov__s1" / "result.json").write_text(json.dumps({"seed": 1, "status": "failed"}))
    res = analyse(study)
    assert res["seeds"] == [0, 2, 3] and res["excluded"] == [{"dir": "clip_cov__s1", "status": "failed"}]
    assert analyse(study, max_seeds=2)["seeds"] == [0, 2]
    assert analyse(study, max_seeds=2)["verdicts"]["claims"][0]["verdict"] == "inconclusive"  # n = 2 < 3


@pytest.mark.parametrize(
    "e1,e2,e3,start",
    [
        ("reproduces", "reproduces", "inconclusive", "no:"),
        ("reproduces", "reproduces", "reproduces", "partly:"),
        ("reproduces", "inconclusive", "reproduces", "yes:"),
        ("reproduces", "does not", "reproduces", "yes:"),
        ("reproduces", "inconclusive", "inconclusive", "undetermined:"),
        ("does not", "reproduces", "reproduces", "no effect to attribute:"),
        ("inconclusive", "reproduces", "reproduces", "the push raises entropy"),
        ("inconclusive", "reproduces", "inconclusive", "inconclusive:"),
    ],
)
def test_the_registered_answers(e1, e2, e3, start):
    verdicts = {"claims": [{"claim": k, "verdict": v} for k, v in (("E1", e1), ("E2", e2), ("E3", e3))]}
    assert plain_answer(verdicts).startswith(start)


def test_noise_measures_are_read_under_amendment_1s_keys(study):
    noise = analyse(study)["noise_per_step_mean"]
    assert noise["kl_cov"] == {"selected/below_floor": 3.0, "selected/count": 8.0, "penalty/grad_norm": 0.5}
    assert noise["kl_cov_exact"]["penalty/grad_norm"] == 0.0 and noise["grpo"] == {}


def test_fewer_than_the_registered_seeds_is_inconclusive_by_design(study, tmp_path):
    assert analyse(study)["verdicts"]["claims"][0]["verdict"] == "reproduces"  # E1 holds at n = 4 ...
    res = write(study, tmp_path / "out")  # ... but the registration reads no verdict below MIN_SEEDS
    assert res["n"] == 4 < MIN_SEEDS
    assert {c["verdict"] for c in res["verdicts"]["claims"]} == {"inconclusive"}
    assert "inconclusive by design" in (tmp_path / "out" / "rescue.md").read_text()
