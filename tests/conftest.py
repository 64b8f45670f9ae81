"""Fixtures shared by every test folder. The repository root is importable (``tests.helpers``), here and in every
process a test starts (PYTHONPATH): a sweep's job target ``tests.helpers.sweep_targets:behave`` runs in local and
SLURM jobs."""

import copy
import os
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

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
