"""The RL loop end to end on the smallest model: metrics, eval files, result.json, every method."""

import json

import pytest
import torch

from harness.io import read_jsonl
from harness.run.config import load_config
from harness.run.runner import run


def test_a_few_steps_write_the_run_directory(tiny, tmp_path, contract_keys):
    res = run(load_config(tiny), tmp_path / "run", quiet=True)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert contract_keys <= set(r), contract_keys - set(r)
        assert 0 <= r["reward/mean"] <= 1 and r["entropy"] > 0 and 1 <= r["response/length"] <= 6
    assert "entropy/delta" not in rows[0]
    assert rows[1]["entropy/delta"] == pytest.approx(rows[1]["entropy"] - rows[0]["entropy"])
    assert (
        "eval/countdown/avg@2" in rows[1]
        and "eval/countdown/greedy" in rows[2]
        and "eval/countdown/avg@2" not in rows[0]
    )
    assert sorted(p.name for p in (tmp_path / "run" / "eval").iterdir()) == [  # each eval + its per-problem grades
        "step_0.json",
        "step_0.per_problem.json",
        "step_2.json",
        "step_2.per_problem.json",
        "step_3.json",
        "step_3.per_problem.json",
    ]
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved == json.loads(json.dumps(res))
    for k in (
        "schema_version",
        "run_id",
        "status",
        "backend",
        "method",
        "advantage",
        "method_config",
        "model",
        "model_params",
        "task",
        "seed",
        "steps",
        "wall_time_s",
        "summary",
        "eval",
        "timing",
    ):
        assert k in saved, k
    assert saved["status"] == "completed" and saved["steps"] == 3 and saved["method"] == "grpo"
    assert saved["summary"]["entropy_start"] == pytest.approx(rows[0]["entropy"])  # 10% of 3 steps -> 1 step
    assert saved["summary"]["reward_end"] == pytest.approx(rows[-1]["reward/mean"])
    suite = saved["eval"]["suites"]["countdown"]
    assert saved["eval"]["step"] == 3 and suite["primary"] == "avg@2" and suite["n_problems"] == 8
    assert suite["temperature"] == 0.6 and set(suite["metrics"]) >= {"avg@2", "pass@2", "greedy"}
    assert set(saved["timing"]) >= {"rollout_s", "score_s", "update_s"}


@pytest.mark.parametrize(
    "method",
    [
        {"name": "rloo"},
        {"name": "prime", "prm_lr": 1e-3},
        {"name": "entropy_bonus", "coef": 0.01},
        {"name": "clip_higher"},
        {"name": "clip_cov", "clip_ratio": 0.05, "cov_lb": -1.0},
        {"name": "kl_cov", "k_ratio": 0.1},
        {"name": "kl_cov", "k_ratio": 0.1, "scope": "global"},
    ],
)
def test_every_method_trains(tiny, tmp_path, method):
    tiny["method"] = method
    tiny["train"].update(steps=2, checkpoint_every=0)
    tiny["eval"]["every"] = 0
    res = run(load_config(tiny), tmp_path, quiet=True)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert res["status"] == "completed" and len(rows) == 2
    assert res["method_config"]["name"] == method["name"]
    if method["name"] in ("kl_cov", "clip_cov"):
        assert sum(r["selected/count"] for r in rows) > 0  # the covariance methods acted on tokens
    if method["name"] == "prime":
        assert all("prm/loss" in r for r in rows)
    if method["name"] == "entropy_bonus":
        assert "entropy/token_mean" in rows[0]


def test_policy_changes_and_dynamic_filtering(tiny, tmp_path):
    from harness.backends.pocket.trainer import PocketTrainer

    tiny["train"].update(dynamic_filtering=True, max_gen_batches=2, steps=1)
    tr = PocketTrainer(load_config(tiny), tmp_path, log=lambda *_: None)
    tr.setup()
    before = [p.detach().clone() for p in tr.model.parameters()]
    ro = tr.rollout(1)
    if ro["batch"] is not None:  # kept groups all have mixed rewards
        g = ro["scores"].view(-1, 4)
        assert bool((g.max(1).values != g.min(1).values).all())
        assert ro["metrics"]["rollout/kept_groups"] <= 4
    tiny["train"]["dynamic_filtering"] = False
    tiny["method"] = {"name": "entropy_bonus", "coef": 0.01}  # a gradient even when every reward is 0 (random model)
    tr2 = PocketTrainer(load_config(tiny), tmp_path / "b", log=lambda *_: None)
    tr2.setup()
    tr2.train_step(1)
    assert any(not torch.equal(a, b) for a, b in zip(before, tr2.model.parameters()))


def test_tensorboard_sink_gets_the_metrics(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tiny["train"].update(steps=2, checkpoint_every=0)
    tiny["eval"]["every"] = 0
    tiny["logging"]["tensorboard"] = True
    run(load_config(tiny), tmp_path, quiet=True)
    (attempt,) = (tmp_path / "tensorboard").iterdir()  # one folder per tracker run (harness/run/tracking.py)
    acc = EventAccumulator(str(attempt))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"entropy", "reward/mean", "cov/term", "eval/countdown/avg@2"} <= tags
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [e.value for e in acc.Scalars("entropy")] == pytest.approx([r["entropy"] for r in rows], rel=1e-6)


def test_wandb_offline_sink(tiny, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tiny["train"].update(steps=2, checkpoint_every=0)
    tiny["eval"]["every"] = 0
    tiny["logging"].update(wandb=True, wandb_mode="offline")
    res = run(load_config(tiny), tmp_path, quiet=True)
    assert res["status"] == "completed"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))  # the offline run file `wandb sync` uploads later


def test_generated_entropy_is_the_official_entropy_of_every_response_before_filtering(tiny, tmp_path):
    """``entropy/generated`` comes from the sampling pass over all generated responses; without filtering it is the
    logged ``entropy`` (eval-mode forward of the same weights, token mean per response), with filtering it still
    covers the dropped groups (the logged ``entropy`` covers the kept ones only)."""
    tiny["train"].update(steps=2, dynamic_filtering=False)
    run(load_config(tiny), tmp_path / "a", quiet=True)
    for row in read_jsonl(tmp_path / "a" / "metrics.jsonl"):
        assert row["entropy/generated"] == pytest.approx(row["entropy"], rel=1e-5, abs=1e-6)
    tiny["train"].update(dynamic_filtering=True, max_gen_batches=2)
    run(load_config(tiny), tmp_path / "b", quiet=True)
    for row in read_jsonl(tmp_path / "b" / "metrics.jsonl"):
        assert 0 < row["entropy/generated"] < 4.1  # finite, below ln(58) (uniform over the vocabulary)


def test_entropy_after_update_measures_the_updates_effect_on_the_trained_batch_alone(tiny, tmp_path):
    """``train.entropy_after_update`` re-measures the trained batch with the updated weights: zero change at an lr too
    small to move any float32 weight (AdamW's step is ~lr; lr 0 is refused at load), a rise under a strong entropy
    bonus; it is a measurement only (no other metric, no weight changes)."""
    tiny["train"].update(steps=2, dynamic_filtering=False, entropy_after_update=True)
    tiny["eval"]["every"] = 0
    run(load_config({**tiny, "train": {**tiny["train"], "lr": 1e-30}}), tmp_path / "lr0", quiet=True)
    for row in read_jsonl(tmp_path / "lr0" / "metrics.jsonl"):
        assert row["entropy/after_update"] == pytest.approx(row["entropy"], rel=1e-5)
        assert abs(row["entropy/update_delta"]) < 1e-5

    bonus = {**tiny, "method": {"name": "entropy_bonus", "coef": 5.0}}
    run(load_config(bonus), tmp_path / "bonus", quiet=True)
    rows = read_jsonl(tmp_path / "bonus" / "metrics.jsonl")
    for row in rows:
        assert row["entropy/update_delta"] > 1e-3  # the untrained model is near ln(58): it can only rise a little
        assert row["entropy/update_delta"] == pytest.approx(row["entropy/after_update"] - row["entropy"], abs=1e-6)

    run(load_config({**bonus, "train": {**tiny["train"], "entropy_after_update": False}}), tmp_path / "off", quiet=True)
    plain = read_jsonl(tmp_path / "off" / "metrics.jsonl")
    for a, b in zip(rows, plain):
        assert "entropy/update_delta" not in b
        for k in ("entropy", "reward/mean", "cov/term", "grad_norm", "entropy/delta"):
            assert a.get(k) == b.get(k), k  # the second step's rollout comes from identical weights
