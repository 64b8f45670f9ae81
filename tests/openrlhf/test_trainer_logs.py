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
    t.args = SimpleNamespace(logger=SimpleNamespace(logging_steps=1), ckpt=SimpleNamespace(save_steps=float("inf")))
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
