"""Policy losses against hand-computed values: PPO clip, clip-higher, entropy bonus, aggregation, KL-Cov, Clip-Cov."""

import math

import pytest
import torch

import harness
from harness.kernel import ops


def _ppo_case():
    # one response, 4 tokens: ratios 1.0, 1.5, 0.5, 1.1 and advantages 1, 1, -1, -1
    ratio = torch.tensor([[1.0, 1.5, 0.5, 1.1]])
    old = torch.tensor([[-1.0, -2.0, -0.5, -1.5]])
    lp = (old + ratio.log()).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    return lp, old, adv, torch.ones(1, 4)


def test_grpo_ppo_clip_loss_gradient_and_clipfrac():
    lp, old, adv, mask = _ppo_case()
    out = harness.get_method("grpo").policy_loss(lp, old, adv, mask)
    # per token max(-A r, -A clip(r, 0.8, 1.2)): -1, -1.2 (clipped), 0.8 (clipped), 1.1
    assert out.loss.item() == pytest.approx((-1 - 1.2 + 0.8 + 1.1) / 4, rel=1e-6)
    assert out.metrics["clipfrac"] == 0.5
    out.loss.backward()
    # d(-A r)/dlogp = -A r on unclipped tokens; 0 on clipped ones; divided by N = 4
    assert lp.grad.tolist()[0] == pytest.approx([-1.0 / 4, 0.0, 0.0, 1.1 / 4], rel=1e-6)


def test_clip_higher_widens_only_the_upper_bound():
    lp, old, adv, mask = _ppo_case()
    out = harness.get_method("clip_higher").policy_loss(lp, old, adv, mask)
    assert out.loss.item() == pytest.approx((-1 - 1.28 + 0.8 + 1.1) / 4, rel=1e-6)


def test_ppo_kl_metric_is_mean_old_minus_new():
    lp, old, adv, mask = _ppo_case()
    out = harness.get_method("grpo").policy_loss(lp, old, adv, mask)
    expected = -sum(math.log(r) for r in [1.0, 1.5, 0.5, 1.1]) / 4
    assert out.metrics["ppo_kl"] == pytest.approx(expected, rel=1e-5)


def test_entropy_bonus_subtracts_coef_times_token_mean_entropy():
    lp, old, adv, mask = _ppo_case()
    ent = torch.tensor([[0.5, 1.0, 1.5, 2.0]], requires_grad=True)
    out = harness.get_method("entropy_bonus", coef=0.1).policy_loss(lp, old, adv, mask, entropy=ent)
    assert out.loss.item() == pytest.approx((-1 - 1.2 + 0.8 + 1.1) / 4 - 0.1 * 1.25, rel=1e-6)
    out.loss.backward()
    assert ent.grad.tolist()[0] == pytest.approx([-0.1 / 4] * 4)
    assert out.metrics["entropy/token_mean"] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="entropy_bonus needs the per-token entropy"):
        harness.get_method("entropy_bonus").policy_loss(lp, old, adv, mask)


def test_aggregation_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert ops.agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert ops.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4 + 0) / 3)
    assert ops.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)  # empty row left out
    assert ops.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / 3)
    with pytest.raises(ValueError, match="allowed: token-mean"):
        ops.agg_loss(loss, mask, "token-sum")


def _cov_case():
    """2 responses x 4 tokens with A = +2 / -2 and log-prob deviations chosen so Cov is exact."""
    d = torch.tensor([[1.5, 0.5, 2.5, 2.0], [-3.0, -3.0, -0.25, -0.25]])  # sums to 0: mean log pi = -1
    lp = d - 1.0
    adv = torch.tensor([[2.0] * 4, [-2.0] * 4])
    # Cov = A * d: row0 [3, 1, 5, 4], row1 [6, 6, 0.5, 0.5]
    return lp, adv, torch.ones(2, 4)


def test_token_covariance_by_hand():
    lp, adv, mask = _cov_case()
    cov = ops.token_covariance(adv, lp, mask)
    assert cov.tolist() == [[3.0, 1.0, 5.0, 4.0], [6.0, 6.0, 0.5, 0.5]]
    groups = ops.covariance_groups(cov.flatten())
    assert groups["cov/mean"] == pytest.approx(26 / 8)
    assert groups["cov/top_20pct"] == 6.0  # max(1, floor(0.2 * 8)) = 1 token
    assert groups["cov/top_50pct"] == pytest.approx((6 + 6 + 5 + 4) / 4)


def test_clip_cov_selection_rule_and_zero_gradient():
    lp, adv, mask = _cov_case()
    old = lp.clone()
    old[0, 3] = lp[0, 3] - math.log(2.5)  # ratio 2.5 with A > 0: already clipped by PPO (range [0, 2])
    lp = lp.clone().requires_grad_()
    m = harness.get_method("clip_cov", clip_ratio=0.5)  # asks for 4 tokens
    out = m.policy_loss(lp, old, adv, mask, generator=torch.Generator().manual_seed(0))
    # candidates: 1 < Cov < 5 strictly, not padding, not PPO-clipped -> only [0, 0] (Cov 3);
    # [0,1] (Cov = 1) and [0,2] (Cov = 5) sit on the bounds, [0,3] (Cov 4) is already clipped
    assert out.metrics["selected/count"] == 1
    out.loss.backward()
    assert lp.grad[0, 0] == 0.0
    assert torch.all(lp.grad.flatten()[1:3] != 0)
    # the zeroed token stays in the token-mean denominator: (sum of the other 7 token losses) / 8
    r = torch.exp(lp.detach() - old)
    per_tok = torch.maximum(-adv * r, -adv * r.clamp(0, 2))
    assert out.loss.item() == pytest.approx((per_tok.sum() - per_tok[0, 0]).item() / 8, rel=1e-6)
    assert out.metrics["clipfrac"] == pytest.approx(1 / 8)


def test_clip_cov_draw_matches_the_official_randperm_for_the_same_rng_state():
    torch.manual_seed(0)
    adv = torch.randn(16, 1).expand(16, 64).contiguous() * 2
    lp = -torch.rand(16, 64) * 4
    mask = torch.ones(16, 64)
    m = harness.get_method("clip_cov", clip_ratio=0.01)  # max(floor(0.01 * 1024), 1) = 10 tokens
    chosen = m.selection_plan(lp, lp, adv, mask, generator=torch.Generator().manual_seed(7))
    cov = ops.token_covariance(adv, lp, mask)
    cand = ((cov > 1) & (cov < 5)).nonzero()  # nothing is PPO-clipped on-policy
    official = cand[torch.randperm(len(cand), generator=torch.Generator().manual_seed(7))[:10]]
    expected = torch.zeros(16, 64, dtype=torch.bool)
    expected[official[:, 0], official[:, 1]] = True
    assert len(cand) > 10 and chosen.sum() == 10
    assert torch.equal(chosen, expected)


def test_kl_cov_top_k_penalty_and_gradient_sign():
    lp0, adv, mask = _cov_case()
    log_ratio = torch.tensor([[0.1, -0.3, 0.0, 0.2], [-0.2, 0.05, 0.0, 0.1]])
    old = lp0 - log_ratio
    lp = lp0.clone().requires_grad_()
    m = harness.get_method("kl_cov", k_ratio=0.25)  # K = max(1, floor(8 * 0.25)) = 2
    out = m.policy_loss(lp, old, adv, mask)
    # the two largest Cov are [1,0] and [1,1] (both 6)
    assert out.metrics["selected/count"] == 2
    r = log_ratio.exp()
    per_tok = -adv * r
    per_tok[1, 0] += log_ratio[1, 0].abs()
    per_tok[1, 1] += log_ratio[1, 1].abs()
    assert out.loss.item() == pytest.approx(per_tok.sum().item() / 8, abs=1e-6)  # log r recomputed: rounding
    out.loss.backward()
    plain = (-adv * r) / 8  # gradient of the unclipped surrogate: -A r / N
    penalty_grad = lp.grad - plain
    expected = torch.zeros(2, 4)
    expected[1, 0], expected[1, 1] = -1 / 8, 1 / 8  # beta * sign(log r) / N on the selected tokens
    assert torch.allclose(penalty_grad, expected, atol=1e-6)
    assert out.metrics["clipfrac"] == 0.0  # KL-Cov never clips


def test_kl_cov_is_inert_on_policy_and_beta_anneals():
    lp, adv, mask = _cov_case()
    grpo_like = -(adv * torch.ones_like(lp)).sum() / 8
    out = harness.get_method("kl_cov", k_ratio=0.5).policy_loss(lp, lp, adv, mask)
    assert out.loss.item() == pytest.approx(grpo_like.item())
    m = harness.get_method("kl_cov", beta=2.0, beta_schedule="linear", anneal_steps=100)
    assert [m.beta_at(s) for s in (0, 50, 100, 150)] == [2.0, 1.0, 0.0, 0.0]


def test_kl_cov_selects_one_token_when_n_is_below_one_over_k():
    lp, adv, mask = _cov_case()
    out = harness.get_method("kl_cov").policy_loss(lp, lp - 0.1, adv, mask)  # 8 tokens * 2e-3 -> floor 0 -> 1
    assert out.metrics["selected/count"] == 1


@pytest.mark.parametrize("name", ["grpo", "rloo", "clip_higher", "entropy_bonus", "clip_cov", "kl_cov", "prime"])
def test_empty_mask_gives_finite_loss_and_no_crash(name):
    m = harness.get_method(name)
    lp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.zeros(2, 3)
    out = m.policy_loss(lp, torch.zeros(2, 3), torch.zeros(2, 3), mask, entropy=torch.zeros(2, 3))
    assert torch.isfinite(out.loss) and out.loss.item() == 0.0
    out.loss.backward()
    assert torch.all(lp.grad == 0)
    assert out.metrics["selected/count"] == 0 and "cov/mean" not in out.metrics  # not measured, not 0
    assert all(math.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_one_valid_token(name):
    mask = torch.tensor([[0.0, 1.0, 0.0]])
    lp = torch.tensor([[-9.0, -0.5, float("nan")]], requires_grad=True)  # padding may hold anything
    out = harness.get_method(name).policy_loss(
        lp, torch.tensor([[0.0, -0.4, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]]), mask
    )
    assert torch.isfinite(out.loss)
    # a lone token has Cov = 0: KL-Cov still penalises 1 token (K >= 1), Clip-Cov has no candidate in (1, 5)
    assert out.metrics["selected/count"] == (1 if name == "kl_cov" else 0)


def test_all_equal_rewards_give_zero_advantage_and_zero_loss_gradient():
    m = harness.get_method("grpo")
    mask = torch.ones(4, 3)
    adv = m.advantages(torch.ones(4), torch.zeros(4, dtype=torch.long), mask)
    lp = torch.randn(4, 3, requires_grad=True)
    m.policy_loss(lp, lp.detach(), adv, mask).loss.backward()
    assert torch.all(adv == 0) and torch.all(lp.grad == 0)


def test_clip_cov_seeded_determinism():
    torch.manual_seed(1)
    adv = torch.randn(32, 1).expand(32, 32).contiguous() * 2
    lp = -torch.rand(32, 32) * 5
    mask = torch.ones(32, 32)
    m = harness.get_method("clip_cov", clip_ratio=0.02)
    pick = lambda seed: m.selection_plan(lp, lp, adv, mask, generator=torch.Generator().manual_seed(seed))  # noqa: E731
    assert torch.equal(pick(3), pick(3))
    assert not all(torch.equal(pick(3), pick(s)) for s in range(4, 10))


def test_loss_input_errors_name_the_argument():
    m = harness.get_method("grpo")
    ok = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="old_log_probs has shape"):
        m.policy_loss(ok, torch.zeros(2, 4), ok, torch.ones(2, 3))
    bad = ok.clone()
    bad[1, 2] = float("inf")
    with pytest.raises(ValueError, match=r"log_probs has a non-finite value .* at \[1, 2\]"):
        m.policy_loss(bad, ok, ok, torch.ones(2, 3))
    with pytest.raises(ValueError, match="advantages has a non-finite"):
        m.policy_loss(ok, ok, bad, torch.ones(2, 3))
    with pytest.raises(ValueError, match="mask must be 2-D"):
        m.policy_loss(ok, ok, ok, torch.ones(6))
