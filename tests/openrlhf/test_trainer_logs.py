"""The patched ``BasePPOTrainer.save_logs_and_checkpoints`` (real OpenRLHF class) writes our metrics.jsonl,
still feeds OpenRLHF's own loggers, and stops the fit loop after ``steps``."""

import json
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.openrlhf


class RecordingLogger:
    def __init__(self):
        self.rows = []

    def log_train(self, step, logs):
        self.rows.append((step, dict(logs)))


def _trainer(tmp_path):
    from harness.backends.openrlhf import hook

    hook.install()
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    assert getattr(ppo_trainer, hook.PATCHED_FLAG, False)
    t = ppo_trainer.BasePPOTrainer.__new__(ppo_trainer.BasePPOTrainer)
    t.args = SimpleNamespace(
        logger=SimpleNamespace(logging_steps=1), ckpt=SimpleNamespace(save_steps=float("inf"), save_hf=False)
    )
    t.wandb_logger, t.tensorboard_logger = None, RecordingLogger()
    t.samples_generator = SimpleNamespace(generate_samples=lambda **k: (["sample"], 1.0, 8, False))
    return t


def test_logs_written_and_run_stops_after_steps(tmp_path, configure):
    configure({"name": "kl_cov"}, run_dir=tmp_path, steps=2)
    t = _trainer(tmp_path)
    t.save_logs_and_checkpoints(1, {"rollout/reward_mean": 0.5, "harness/entropy": 1.2, "selected/frac": 0.01})
    assert t.samples_generator.generate_samples()[0] == ["sample"]
    t.save_logs_and_checkpoints(2, {"rollout/reward_mean": 0.75, "harness/entropy": 1.0})
    assert t.samples_generator.generate_samples() == ([], 0.0, 0, True)  # fit() sees an exhausted loader
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["reward/mean"] == 0.5 and rows[0]["selected/frac"] == 0.01
    assert rows[1]["entropy/delta"] == pytest.approx(-0.2)
    assert [s for s, _ in t.tensorboard_logger.rows] == [1, 2]  # upstream logging still happens
    assert t.tensorboard_logger.rows[0][1]["harness/entropy"] == 1.2


def test_eval_step_writes_eval_json_and_one_merged_row(tmp_path, configure):
    """At an eval step fit() calls save_logs_and_checkpoints (the row is written before the step's checkpoint),
    then evaluate, then save_best_checkpoint: the eval's keys join that row, still one row per step."""
    from harness.backends.openrlhf import plugin

    configure({"name": "grpo"}, run_dir=tmp_path, steps=10)
    plugin.STATE.config["eval"] = {
        "n_samples": 4,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 512,
        "counts": {"aime": 30},
    }
    t = _trainer(tmp_path)
    t.eval_dataloader = ["loaded"]
    t.args.eval = SimpleNamespace(steps=2)
    t.best_eval_metric_key = "none"
    t.save_logs_and_checkpoints(1, {"rollout/reward_mean": 0.1})
    t.save_logs_and_checkpoints(2, {"rollout/reward_mean": 0.2})
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2  # written before the checkpoint
    t.save_best_checkpoint({"eval_aime_pass1": 0.25, "eval_aime_pass4": 0.5, "eval_num_samples": 120.0}, 2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1] == {
        "step": 2,
        "reward/mean": 0.2,
        "time/wall": rows[1]["time/wall"],
        "eval/aime/avg@4": 0.25,
        "eval/aime/pass@4": 0.5,
    }
    ev = json.loads((tmp_path / "eval" / "step_2.json").read_text())
    assert ev == {
        "step": 2,
        "suites": {
            "aime": {
                "suite": "aime",
                "n_problems": 30,
                "n_samples": 4,
                "temperature": 0.6,
                "top_p": 1.0,
                "max_tokens": 512,
                "metrics": {"avg@4": 0.25, "pass@4": 0.5},
                "primary": "avg@4",
            }
        },
    }


def test_resume_at_the_last_step_trains_no_more_and_continues_entropy_delta(tmp_path, configure, monkeypatch):
    """A run killed after its last checkpoint resumes with fit() ending at once (no step past train.steps), and a
    run resumed mid-way takes the previous entropy from its last logged row (entropy/delta continues). Upstream's
    own init_checkpoint_states runs; only the policy worker's reply (a Ray call) is given here."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import ray

    from harness.backends.openrlhf import plugin

    configure({"name": "grpo"}, run_dir=tmp_path, steps=2)
    states = {"global_step": 1, "episode": 0, "total_consumed_prompts": 4, "data_loader_state_dict": {}}
    monkeypatch.setattr(ray, "get", lambda refs: [dict(states)])
    (tmp_path / "ckpt" / "_actor").mkdir(parents=True)

    def resumed_trainer():
        t = _trainer(tmp_path)
        t.args.ckpt.path, t.args.ckpt.load_enable = str(tmp_path / "ckpt"), True
        t.actor_model_group = SimpleNamespace(async_run_method=lambda method_name: ["ref"])
        plugin.STATE.prev_entropy = None  # a new process
        assert ppo_trainer.BasePPOTrainer.init_checkpoint_states(t) == states
        return t

    _trainer(tmp_path).save_logs_and_checkpoints(1, {"rollout/reward_mean": 0.1, "harness/entropy": 0.8})
    t = resumed_trainer()
    assert t.samples_generator.generate_samples()[0] == ["sample"]  # mid-way: training goes on
    t.save_logs_and_checkpoints(2, {"rollout/reward_mean": 0.2, "harness/entropy": 0.5})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["entropy/delta"] == pytest.approx(0.5 - 0.8)
    states["global_step"] = 2
    t = resumed_trainer()
    assert t.samples_generator.generate_samples() == ([], 0.0, 0, True)  # at its end: no third step


def test_the_ray_actor_class_gets_the_patches():
    """``@ray.remote class PPOTrainer`` copies every method into Ray's actor class when the module is imported;
    the patched methods must be the ones that class (what Ray ships to the worker) calls."""
    from harness.backends.openrlhf import hook

    hook.install()
    import openrlhf.trainer.ppo_trainer as ppo_trainer

    actor_cls = ppo_trainer.PPOTrainer.__ray_metadata__.modified_class
    for name in ("save_logs_and_checkpoints", "save_best_checkpoint", "init_checkpoint_states"):
        assert getattr(actor_cls, name) is getattr(ppo_trainer.BasePPOTrainer, name)
        assert getattr(actor_cls, name).__qualname__.startswith("patch_ppo_trainer.")
