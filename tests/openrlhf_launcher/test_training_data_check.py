"""The OpenRLHF backend refuses a local math prompt set the reward cannot read before anything starts (issue 22:
raw DAPO-Math-17k asks for an 'Answer:' line, the reward reads the last \\boxed{}: all-zero rewards)."""

from pathlib import Path

import pytest

from harness.backends.openrlhf.runner import train
from harness.data import TrainingDataError
from harness.run.config import load_config

SAMPLES = Path(__file__).resolve().parents[2] / "harness" / "data" / "samples"


def _cfg(task):
    return load_config(
        {
            "backend": "openrlhf",
            "method": {"name": "grpo"},
            "model": {"name": "Qwen/Qwen2.5-0.5B"},
            "task": {"name": str(task)},
            "train": {"micro_batch_size": 1},
            "eval": {"every": 0},
        }
    )


def test_raw_dapo_prompts_are_refused_before_launch(tmp_path):
    raw = SAMPLES / "dapo-math-17k-raw-prompts.jsonl"  # {prompt, answer} with DAPO's own 'Answer:' instruction
    with pytest.raises(TrainingDataError, match=r"12 of 12 prompts do not ask for the answer in \\boxed"):
        train(_cfg(raw), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before the run directory was made
