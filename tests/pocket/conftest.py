import copy

import pytest

TINY = {
    "backend": "pocket",
    "seed": 0,
    "method": {"name": "grpo"},
    "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
    "task": {"name": "countdown", "test_size": 16},
    "train": {
        "steps": 3,
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "updates_per_rollout": 2,
        "micro_batch_size": 4,
        "max_new_tokens": 6,
        "checkpoint_every": 1,
    },
    "eval": {"every": 2, "n_samples": 2, "max_problems": 8},
    "logging": {"progress": False},
}


@pytest.fixture
def tiny():
    """A run config small enough for a test: 3 steps of 16 responses on the 0.3M model, no warm start."""
    return copy.deepcopy(TINY)


@pytest.fixture
def contract_keys():
    """The metrics every pocket step logs (docs/contracts.md), checked by the loop test and the SmolLM2 slow test."""
    return {
        "step",
        "reward/mean",
        "entropy",
        "cov/term",
        "cov/mean",
        "cov/top_0.02pct",
        "cov/top_0.2pct",
        "cov/top_2pct",
        "cov/top_20pct",
        "cov/top_50pct",
        "selected/count",
        "selected/frac",
        "clipfrac",
        "ppo_kl",
        "response/length",
        "lr",
        "time/rollout",
        "time/score",
        "time/update",
        "time/wall",
    }
