"""``python -m harness.results.entropy_table``: H end and reward end per method through the one window of
harness/run/metrics.py, mean ± 95% CI over seeds and the paired Δ vs GRPO, checked by hand on fixture runs."""

import math

import pytest

from harness.results.collect import collect
from harness.results.entropy_table import entropy_table, main

DECAY, STEPS, LAW = 0.08, 20, (0.2, 0.9)  # 20 steps -> a window of 2 steps


def _h(h0, t):
    return h0 * math.exp(-DECAY * t)


def _end(h0):
    return (_h(h0, 19) + _h(h0, 20)) / 2


def _reward_end(h0):
    a, b = LAW
    return sum(-a * math.exp(_h(h0, t)) + b for t in (19, 20)) / 2


def test_paired_delta_and_means_by_hand(runs_root, mk):
    for s in (0, 1):
        mk(runs_root, f"g{s}", seed=s, h0=1.0 + 0.1 * s, steps=STEPS, decay=DECAY, law=LAW)
        mk(runs_root, f"k{s}", method="kl_cov", seed=s, h0=2.0 + 0.1 * s, steps=STEPS, decay=DECAY, law=LAW)
    text = entropy_table(collect([runs_root]))
    lines = text.splitlines()
    assert lines[0].startswith("| method | n | H end (mean ± 95% CI) | reward end (mean ± 95% CI) |")
    g_end = (_end(1.0) + _end(1.1)) / 2
    assert lines[2].startswith(f"| grpo | 2 | {g_end:.3f} ± ")
    # the per-seed differences are equal up to the exp's curvature: the paired Δ is their mean
    d = [_end(2.0 + 0.1 * s) - _end(1.0 + 0.1 * s) for s in (0, 1)]
    assert "| kl_cov | 2 | " in lines[3] and f"+{sum(d) / 2:.3f} ± " in lines[3]
    start = [(_h(h0, 1) + _h(h0, 2)) / 2 for h0 in (1.0, 1.1, 2.0, 2.1)]
    assert lines[-3].startswith(f"Entropy at the start over all runs: {sum(start) / 4:.3f} ± ")
    # two seeds whose differences agree give a narrow interval, but marks need Holm and 5 seeds per arm (issue 35)
    assert "**" not in text and lines[-1].startswith("MARKS: ") and "no test is run" in lines[-1]
    assert f"{_reward_end(1.0) / 2 + _reward_end(1.1) / 2:.3f}" in lines[2]


def test_one_table_per_model_and_a_clear_refusal_without_the_baseline(runs_root, mk, capsys):
    mk(runs_root, "a", seed=0, steps=STEPS, model="pocket-1m")
    mk(runs_root, "b", seed=0, steps=STEPS, model="pocket-3m", model_params=3_000_000)
    text = entropy_table(collect([runs_root]))
    assert "### pocket-1m, task arith" in text and "### pocket-3m, task arith" in text
    with pytest.raises(ValueError, match="baseline method 'rloo' has no completed run; methods present: grpo"):
        entropy_table(collect([runs_root]), baseline="rloo")
    assert main([str(runs_root), "--baseline", "rloo"]) == 2
    assert "baseline method 'rloo'" in capsys.readouterr().err
