"""GSPO, CISPO, SAPO and CE-GPPO against hand-computed values and gradients (the gradient is each one's point)."""

import math

import pytest
import torch

import harness

# token-mean divides by (N + 1e-8), verl's masked mean: hand values match to ~1e-8 relative
TM = 1e-7


def _tokens(ratios, old, adv):
    old = torch.tensor([old], dtype=torch.float64)
    lp = (old + torch.tensor([ratios], dtype=torch.float64).log()).requires_grad_()
    return lp, old, torch.tensor([adv], dtype=torch.float64), torch.ones_like(old)


# -- GSPO -------------------------------------------------------------------------------------------
def _gspo_case(adv_row0=(1.0, 1.0)):
    """Row 0: 2 tokens, log-ratios 0.1 and -0.02 (mean 0.04); row 1: 3 tokens, log-ratios 0 (s = 1), A = -1."""
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], dtype=torch.float64)
    lr = torch.tensor([[0.1, -0.02, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    lp = (old + lr).requires_grad_()
    adv = torch.tensor([[adv_row0[0], adv_row0[1], 0.0], [-1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    return lp, old, adv, mask


def test_gspo_sequence_ratio_value_and_gradient_unclipped():
    lp, old, adv, mask = _gspo_case()
    m = harness.get_method("gspo", eps_low=0.2, eps_high=0.2)
    out = m.policy_loss(lp, old, adv, mask)
    s0 = math.exp(0.04)
    # seq-mean-token-mean: ((-1 * s0) + (+1 * 1)) / 2
    assert out.loss.item() == pytest.approx((-s0 + 1.0) / 2, rel=1e-12)
    out.loss.backward()
    # d/dlogp_t of -A s_i with s_i = exp(mean log-ratio): -A s_i / |y_i|, then / 2 rows
    assert lp.grad[0].tolist() == pytest.approx([-s0 / 2 / 2, -s0 / 2 / 2, 0.0], rel=1e-12)
    assert lp.grad[1].tolist() == pytest.approx([1 / 3 / 2] * 3, rel=1e-12)


def test_gspo_clips_the_whole_sequence_at_the_paper_eps():
    lp, old, adv, mask = _gspo_case()
    out = harness.get_method("gspo").policy_loss(lp, old, adv, mask)  # eps 3e-4 / 4e-4
    assert out.loss.item() == pytest.approx((-(1 + 4e-4) + 1.0) / 2, rel=1e-12)
    out.loss.backward()
    assert lp.grad[0].tolist() == [0.0, 0.0, 0.0]  # clipped sequence: no gradient through any token
    assert out.metrics["clipfrac"] == pytest.approx(2 / 5)


def test_gspo_token_variant_equals_sequence_variant_for_sequence_advantages():
    grads = {}
    for level in ("sequence", "token"):
        lp, old, adv, mask = _gspo_case()
        out = harness.get_method("gspo", eps_low=0.2, eps_high=0.2, level=level).policy_loss(lp, old, adv, mask)
        out.loss.backward()
        grads[level] = (out.loss.item(), lp.grad.clone())
    assert grads["sequence"][0] == pytest.approx(grads["token"][0], rel=1e-12)
    assert torch.allclose(grads["sequence"][1], grads["token"][1], rtol=1e-12, atol=0)


def test_gspo_token_variant_differs_with_token_advantages_by_hand():
    s0 = math.exp(0.04)
    for level, expected in (
        ("sequence", [-s0 * 1.5 / 2 / 2] * 2),  # every token moves s: -mean(A) s / |y|
        ("token", [-2.0 * s0 / 2 / 2, -1.0 * s0 / 2 / 2]),
    ):  # token t: -A_t s / |y|
        lp, old, adv, mask = _gspo_case(adv_row0=(2.0, 1.0))
        out = harness.get_method("gspo", eps_low=0.2, eps_high=0.2, level=level).policy_loss(lp, old, adv, mask)
        out.loss.backward()
        assert lp.grad[0, :2].tolist() == pytest.approx(expected, rel=1e-12), level


def test_gspo_is_a_no_op_on_policy():
    lp, old, adv, mask = _gspo_case()
    lp = old.clone().requires_grad_()
    out = harness.get_method("gspo").policy_loss(lp, old, adv, mask)
    out.loss.backward()
    assert out.metrics["clipfrac"] == 0.0
    assert lp.grad[0, :2].tolist() == pytest.approx([-0.25, -0.25])  # plain seq-mean policy gradient


# -- CISPO ------------------------------------------------------------------------------------------
CISPO_RATIOS, CISPO_OLD, CISPO_ADV = [0.5, 1.5, 1.1], [-1.0, -2.0, -0.5], [1.0, 1.0, -1.0]


@pytest.mark.parametrize(
    "hp,weights",
    [
        ({}, [0.5, 1.2, 1.1]),  # verl: [1 - 10, 1 + 0.2]
        ({"eps_low": 0.2}, [0.8, 1.2, 1.1]),  # verl with a floor
        ({"convention": "trl", "eps_high": 5.0}, [0.5, 1.5, 1.1]),  # TRL docs: absolute cap 5
        ({"convention": "trl", "eps_high": 0.2}, [0.2, 0.2, 0.2]),  # TRL unset epsilon_high: every weight 0.2
    ],
)
def test_cispo_weights_loss_and_stop_gradient(hp, weights):
    lp, old, adv, mask = _tokens(CISPO_RATIOS, CISPO_OLD, CISPO_ADV)
    out = harness.get_method("cispo", **hp).policy_loss(lp, old, adv, mask)
    logp = [o + math.log(r) for o, r in zip(CISPO_OLD, CISPO_RATIOS)]
    assert out.loss.item() == pytest.approx(sum(-w * a * p for w, a, p in zip(weights, CISPO_ADV, logp)) / 3, rel=TM)
    out.loss.backward()
    # stop-gradient: d/dlogp of -sg(w) A logp is -w A (no d w / d logp term, even where w = r is unclipped)
    assert lp.grad[0].tolist() == pytest.approx([-w * a / 3 for w, a in zip(weights, CISPO_ADV)], rel=TM)
    n_clipped = sum(w != r for w, r in zip(weights, CISPO_RATIOS))
    assert out.metrics["clipfrac"] == pytest.approx(n_clipped / 3)


def test_cispo_keeps_gradient_where_ppo_drops_it():
    lp, old, adv, mask = _tokens([1.5], [-1.0], [1.0])
    harness.get_method("grpo").policy_loss(lp, old, adv, mask).loss.backward()
    assert lp.grad.item() == 0.0
    lp.grad = None
    harness.get_method("cispo").policy_loss(lp, old, adv, mask).loss.backward()
    assert lp.grad.item() == pytest.approx(-1.2)


# -- SAPO -------------------------------------------------------------------------------------------
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_sapo_gate_value_and_gradient_by_hand():
    ratios, adv = [1.0, 1.5, 0.7, 1.3], [1.0, 1.0, -1.0, -2.0]
    lp, old, a, mask = _tokens(ratios, [-1.0, -0.5, -2.0, -1.5], adv)
    out = harness.get_method("sapo").policy_loss(lp, old, a, mask)  # one row: seq-mean-token-mean = mean
    taus = [1.0 if x > 0 else 1.05 for x in adv]
    f = [4 / t * _sigmoid(t * (r - 1)) for r, t in zip(ratios, taus)]
    assert out.loss.item() == pytest.approx(sum(-fi * ai for fi, ai in zip(f, adv)) / 4, rel=TM)
    out.loss.backward()
    # d f(r)/d logp = 4 sigma (1 - sigma) r (the 1/tau cancels the tau of the chain rule)
    dg = [4 * _sigmoid(t * (r - 1)) * (1 - _sigmoid(t * (r - 1))) * r for r, t in zip(ratios, taus)]
    assert lp.grad[0].tolist() == pytest.approx([-d * ai / 4 for d, ai in zip(dg, adv)], rel=TM)
    assert lp.grad[0, 0].item() == pytest.approx(-1 / 4)  # on-policy token: the plain policy gradient
    assert out.metrics["clipfrac"] == 0.0


# -- CE-GPPO ----------------------------------------------------------------------------------------
def test_ce_gppo_clipped_regions_keep_a_beta_scaled_gradient():
    # tokens: low region (r 0.5, A -1), high region (r 1.5, A +1), inside (1.1, -1), PPO-unclipped side (0.5, +1),
    # dual-clip (r 20, A -1)
    ratios, adv = [0.5, 1.5, 1.1, 0.5, 20.0], [-1.0, 1.0, -1.0, 1.0, -1.0]
    lp, old, a, mask = _tokens(ratios, [-1.0, -2.0, -0.5, -1.5, -4.0], adv)
    out = harness.get_method("ce_gppo").policy_loss(lp, old, a, mask)  # beta1 0.75, beta2 1, eps 0.2, c 10
    values = [0.75 * 0.8, -1.2, 1.1, -0.5, 10.0]
    assert out.loss.item() == pytest.approx(sum(values) / 5, rel=TM)
    out.loss.backward()
    grads = [0.75 * 0.8, -1.0 * 1.2, 1.1, -0.5, 0.0]  # beta (1 -/+ eps) (-A); -A r; dual-clipped: 0
    assert lp.grad[0].tolist() == pytest.approx([g / 5 for g in grads], rel=TM)
    assert out.metrics["clipfrac"] == pytest.approx(2 / 5)
    # PPO gives the first two tokens no gradient at all
    lp.grad = None
    harness.get_method("grpo").policy_loss(lp, old, a, mask).loss.backward()
    assert lp.grad[0, :2].tolist() == [0.0, 0.0]


def test_ce_gppo_with_beta_one_is_gppo():
    lp, old, a, mask = _tokens([0.5, 1.5], [-1.0, -1.0], [-1.0, 1.0])
    harness.get_method("ce_gppo", beta1=1.0, beta2=1.0).policy_loss(lp, old, a, mask).loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([0.8 / 2, -1.2 / 2], rel=TM)


def test_ce_gppo_rejects_a_dual_clip_constant_of_one():
    with pytest.raises(harness.HyperparameterError, match="clip_ratio_c"):
        harness.get_method("ce_gppo", clip_ratio_c=1.0)
