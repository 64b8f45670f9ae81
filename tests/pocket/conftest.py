import pytest


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
