"""adaptive_entropy, high_entropy_tokens and entropy_advantage against hand-worked values."""

import math

import pytest
import torch

import harness
from harness.methods.high_entropy_tokens import n_top

TM = 1e-7  # token-mean divides by N + 1e-8 (verl's masked mean)


# -- adaptive_entropy -------------------------------------------------------------------------------
def _feed(m, values, key):
    out = []
    for h in values:
        m.on_step_end({"step": len(out), key: h})
        out.append((round(m.coef, 12), m.enabled))
    return out


def test_skywork_controller_by_hand():
    m = harness.get_method("adaptive_entropy")  # c0 0, target 0.2, delta 1e-4, c in [0, 0.005], gate open
    assert (m.coef, m.enabled) == (0.0, 1)
    got = _feed(m, [0.1, 0.1, 0.3, 0.2, 0.25, 0.1], "rollout/neg_logprob")
    # < target: c += 1e-4 and gate on; >= target (0.2 included): c -= 1e-4 (floored at 0) and gate off
    assert got == [(1e-4, 1), (2e-4, 1), (1e-4, 0), (0.0, 0), (0.0, 0), (1e-4, 1)]


def test_trl_controller_compares_with_le_starts_closed_and_reads_exact_entropy():
    m = harness.get_method("adaptive_entropy", variant="trl", coef_init=0.01, delta=0.005, coef_max=0.02)
    assert (m.coef, m.enabled, m.last_measured) == (0.01, 0, math.inf)
    got = _feed(m, [0.2, 0.1, 0.5, 0.5, 0.5], "entropy/rollout_token_mean")
    assert got == [(0.015, 1), (0.02, 1), (0.015, 0), (0.01, 0), (0.005, 0)]
    with pytest.raises(ValueError, match="entropy/rollout_token_mean"):
        m.on_step_end({"step": 5, "rollout/neg_logprob": 0.1})  # the TRL variant never reads the Skywork measure


def test_coefficient_is_clipped_to_its_range():
    m = harness.get_method("adaptive_entropy", coef_init=0.005)
    _feed(m, [0.0] * 3, "rollout/neg_logprob")
    assert m.coef == 0.005


def test_adaptive_loss_uses_the_previous_steps_gated_coefficient():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, adv, mask = lp.detach().clone(), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    ent = torch.tensor([[0.5, 1.5]], requires_grad=True)
    m = harness.get_method("adaptive_entropy", coef_init=0.3)
    out = m.policy_loss(lp, old, adv, mask, entropy=ent)  # gate open (Skywork): -0.3 * mean H
    assert out.loss.item() == pytest.approx((-1 + 1) / 2 - 0.3 * 1.0, rel=TM)
    assert out.metrics["adaptive_entropy/coef_realized"] == pytest.approx(0.3)
    out.loss.backward()
    assert ent.grad.tolist()[0] == pytest.approx([-0.3 / 2] * 2, rel=TM)
    m.on_step_end({"rollout/neg_logprob": 0.9})  # above target: c -> 0.3 - 1e-4 clipped to 0.005, gate off
    ent.grad = None
    out = m.policy_loss(lp, old, adv, mask, entropy=ent)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-12)
    out.loss.backward()
    assert ent.grad.abs().max() == 0
    assert out.metrics["adaptive_entropy/coef"] == 0.005 and out.metrics["adaptive_entropy/enabled"] == 0.0


def test_controller_state_round_trips():
    a = harness.get_method("adaptive_entropy", variant="trl")
    _feed(a, [0.1, 0.3, 0.05], "entropy/rollout_token_mean")
    b = harness.get_method("adaptive_entropy", variant="trl")
    b.load_state_dict(a.state_dict())
    assert _feed(a, [0.1, 0.4], "entropy/rollout_token_mean") == _feed(b, [0.1, 0.4], "entropy/rollout_token_mean")
    assert a.state_dict() == b.state_dict()


# -- high_entropy_tokens ----------------------------------------------------------------------------
def test_official_top_count():
    assert [n_top(n, 0.2) for n in (0, 1, 3, 5, 10, 11, 15)] == [0, 1, 1, 1, 2, 3, 3]
    assert n_top(10, 0.300001) == 3  # int(3.00001 + 0.9999): fractions below 1e-4 round down (a ceil would give 4)


def _het_case():
    # one response of 10 on-policy tokens (ratio 1): per-token loss -A; entropies distinct, top-2: tokens 3 and 7
    ent = torch.tensor([[0.1, 0.2, 0.3, 2.0, 0.4, 0.5, 0.6, 1.5, 0.7, 0.8]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 2.0, 1.0, -1.0, -1.0, -3.0, 1.0, 1.0]])
    lp = torch.full((1, 10), -1.0, requires_grad=True)
    return lp, lp.detach().clone(), adv, torch.ones(1, 10), ent


@pytest.mark.parametrize("normalize,denominator", [("selected", 2), ("all", 10)])
def test_high_entropy_tokens_by_hand(normalize, denominator):
    lp, old, adv, mask, ent = _het_case()
    m = harness.get_method("high_entropy_tokens", normalize=normalize)
    tok = m.per_token_loss(lp, old, adv, mask, entropy=ent)
    assert tok.selected.nonzero()[:, 1].tolist() == [3, 7]
    loss = harness.kernel.ops.agg_loss(tok.loss, mask)
    assert loss.item() == pytest.approx((-2.0 + 3.0) / denominator, rel=TM)
    loss.backward()
    expected = [0.0] * 10
    expected[3], expected[7] = -2.0 / denominator, 3.0 / denominator
    assert lp.grad[0].tolist() == pytest.approx(expected, rel=TM, abs=1e-12)


def test_high_entropy_tokens_dual_clip():
    # A < 0 with ratio 20: PPO's loss -A r = 20 is capped at -A c = 10 (no gradient)
    lp = torch.tensor([[math.log(20.0)]], requires_grad=True)
    tok = harness.get_method("high_entropy_tokens").per_token_loss(
        lp, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1), entropy=torch.ones(1, 1)
    )
    assert tok.loss.item() == pytest.approx(10.0)


def test_global_scope_selects_over_the_mini_batch_and_matches_the_whole_batch_loss():
    g = torch.Generator().manual_seed(0)
    ent = torch.rand(8, 6, generator=g)
    mask = (torch.rand(8, 6, generator=g) > 0.2).float()
    mask[:, 0] = 1
    adv = torch.randn(8, 1, generator=g).expand(8, 6).contiguous()
    old = -torch.rand(8, 6, generator=g) - 0.5
    lp = (old + 0.3 * torch.randn(8, 6, generator=g)).requires_grad_()
    m = harness.get_method("high_entropy_tokens", scope="global")
    assert m.needs_global_plan
    whole = m.policy_loss(lp, old, adv, mask, selected=m.selection_plan(lp, old, adv, mask, entropy=ent))
    plan = m.selection_plan(lp, old, adv, mask, entropy=ent)
    assert int(plan.sum()) == n_top(int(mask.sum()), 0.2)
    total = 0
    for rows in (slice(0, 3), slice(3, 8)):  # uneven micro-batches, weighted by their share of the tokens
        part = m.policy_loss(lp[rows], old[rows], adv[rows], mask[rows], selected=plan[rows])
        total = total + part.loss * mask[rows].sum() / mask.sum()
    assert total.item() == pytest.approx(whole.loss.item(), rel=1e-5)
    micro = harness.get_method("high_entropy_tokens")  # official per-micro-batch selection differs
    per_micro = micro.per_token_loss(lp[:3], old[:3], adv[:3], mask[:3], entropy=ent[:3]).selected
    assert int(per_micro.sum()) == n_top(int(mask[:3].sum()), 0.2)


def test_high_entropy_tokens_rejects_other_aggregations():
    with pytest.raises(ValueError, match="token-mean"):
        harness.get_method("high_entropy_tokens", agg="seq-mean-token-mean")


# -- entropy_advantage ------------------------------------------------------------------------------
def test_entropy_advantage_by_hand():
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    ent = torch.tensor([[0.1, 2.0], [0.5, 0.0], [1.0, 9.0], [3.0, 3.0]])
    adv = harness.get_method("entropy_advantage").advantages(
        torch.tensor([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1], mask, entropy=ent
    )
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO: (1 - 0.5) / (unbiased std + 1e-6)
    expected = torch.tensor([[a + 0.04, a + a / 2], [-a + 0.2, -a], [0.0, 0.0], [0.0, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6, rtol=0)


def test_entropy_advantage_never_flips_a_sign_and_takes_other_bases():
    g = torch.Generator().manual_seed(3)
    scores, mask = torch.rand(12, generator=g), torch.ones(12, 4)
    ent = 5 * torch.rand(12, 4, generator=g)
    groups = [i // 4 for i in range(12)]
    for base in ("grpo", "rloo", "w_reinforce"):
        m = harness.get_method("entropy_advantage", advantage_options={"base": base, "alpha": 10.0, "kappa": 1.5})
        plain = harness.get_method("grpo", advantage=base).advantages(scores, groups, mask)
        shaped = m.advantages(scores, groups, mask, entropy=ent)
        assert bool(((shaped - plain) >= 0).all()) and bool((shaped * plain >= 0).all())
        assert torch.allclose(shaped - plain, torch.minimum(10 * ent, plain.abs() / 1.5), atol=1e-6)


def test_entropy_advantage_input_errors():
    m = harness.get_method("entropy_advantage")
    with pytest.raises(ValueError, match="needs entropy"):
        m.advantages(torch.tensor([1.0, 0.0]), [0, 0], torch.ones(2, 2))
    for opts, msg in (({"kappa": 1.0}, "kappa"), ({"base": "prime"}, "base"), ({"alpha": -1.0}, "alpha")):
        with pytest.raises(harness.HyperparameterError, match=msg):  # when the method is built, not at a step
            harness.get_method("entropy_advantage", advantage_options=opts)
