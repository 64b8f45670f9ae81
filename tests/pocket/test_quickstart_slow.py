"""Slow (``pytest -m slow``): the quickstart's GRPO run really learns and really loses entropy.

Thresholds are looser than the seed-0 numbers in docs/pocket.md (entropy 0.425 -> 0.169, reward 0.33 -> 0.66)
so that seed noise does not fail it, but tight enough that a broken sign, a lost gradient or a mis-aligned
log-prob would.
"""

from pathlib import Path

import pytest

from harness.run.config import load_config
from harness.run.runner import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_grpo_learns_and_entropy_falls(tmp_path):
    cfg = load_config(
        ROOT / "sweeps" / "configs" / "pocket_countdown.yaml",
        [f"model.cache_dir={tmp_path / 'cache'}", "logging.progress=false"],
    )
    res = run(cfg, tmp_path / "run", quiet=True)
    s = res["summary"]
    assert s["entropy_end"] < 0.6 * s["entropy_start"]
    assert s["reward_end"] > s["reward_start"] + 0.15
    assert res["warm_start"]["probe_acc"] >= 0.3
