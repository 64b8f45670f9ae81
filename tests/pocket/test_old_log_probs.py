"""Old log-probs as a choice (issue 35): with ``train.old_log_probs: recompute`` the log-ratio of the first, on-policy
mini-batch is exactly 0, so KL-Cov's penalty gradient there is exactly 0; with the sampling pass's log-probs
(``rollout``, the default and the official code's kind of separate pass) it is rounding noise, and the penalty pushes
every selected token at full strength in a direction that noise sets. The logged counts show which it was."""

import json

import pytest
import torch

import harness
from harness.kernel.method import NOISE_FLOOR
from harness.run.config import load_config
from harness.run.runner import run


def one_step(tiny, tmp_path, old_log_probs, name):
    tiny["method"] = {"name": "kl_cov", "k_ratio": 0.5}  # half the tokens selected: many noisy ones
    tiny["train"].update(steps=1, updates_per_rollout=1, old_log_probs=old_log_probs)
    run(load_config(tiny), tmp_path / name, quiet=True)
    (row,) = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return row


def test_recompute_makes_the_first_penalty_gradient_exactly_zero(tiny, tmp_path):
    exact = one_step(tiny, tmp_path, "recompute", "exact")
    assert exact["ppo_kl_abs"] == 0.0  # log r = 0 on every token
    assert exact["selected/count"] > 0 and exact["selected/below_floor"] == 0  # nothing pushed by noise
    assert exact["penalty/grad_norm"] == 0.0


def test_rollout_old_log_probs_push_by_rounding_noise(tiny, tmp_path):
    noisy = one_step(tiny, tmp_path, "rollout", "noisy")
    assert 0 < noisy["ppo_kl_abs"] < NOISE_FLOOR  # the policy has not moved: only rounding differs
    assert 0 < noisy["selected/below_floor"] <= noisy["selected/count"]
    assert noisy["penalty/grad_norm"] > 0.0  # beta * sign(noise) * grad log pi at full strength


def test_below_floor_counts_nonzero_noise_only():
    m = harness.get_method("kl_cov", k_ratio=1.0)
    mask = torch.ones(1, 4)
    lp = torch.tensor([[-1.0, -2.0, -3.0, -4.0]], requires_grad=True)
    old = lp.detach() - torch.tensor([[0.0, 5e-5, -2e-5, 3e-4]])  # exact, noise, noise, moved
    out = m.policy_loss(lp, old, torch.tensor([[1.0, -1.0, 1.0, -1.0]]), mask)
    assert out.metrics["selected/count"] == 4 and out.metrics["selected/below_floor"] == 2
    # the penalty alone: beta * |log r| token-mean over 4 tokens; its gradient is beta * sign(log r) / 4
    assert float(out.penalty.detach()) == pytest.approx((5e-5 + 2e-5 + 3e-4) / 4, rel=1e-3)
    (grad,) = torch.autograd.grad(out.penalty, lp)
    assert grad.tolist() == [[0.0, 0.25, -0.25, 0.25]]


def test_dead_zone_removes_the_noise_push_only():
    m = harness.get_method("kl_cov", k_ratio=1.0, dead_zone=1e-4)
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = lp.detach() - torch.tensor([[5e-5, 3e-4]])
    out = m.policy_loss(lp, old, torch.zeros(1, 2), torch.ones(1, 2))
    (grad,) = torch.autograd.grad(out.penalty, lp)
    assert grad.tolist() == [[0.0, 0.5]]  # inside the band: no push; outside: beta * sign / 2 as before
    assert float(out.penalty.detach()) == pytest.approx((3e-4 - 1e-4) / 2, rel=1e-3)


def test_recompute_is_refused_where_a_backend_cannot_do_it(tiny):
    tiny["train"]["old_log_probs"] = "recompute"
    assert load_config(tiny).train.old_log_probs == "recompute"
    with pytest.raises(ValueError, match="old_log_probs: 'recompute'"):
        load_config({**tiny, "backend": "trl"})
