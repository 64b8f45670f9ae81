"""Numerics of the losses (issue 16, item 9): half-precision inputs are upcast before the ratio, a loss that is
still not finite raises an error naming the method and the largest log-ratio, and PRIME ignores NaN padding."""

import math

import pytest
import torch

import harness

PAPER = ["grpo", "rloo", "clip_higher", "entropy_bonus", "clip_cov", "kl_cov", "prime"]


def _case(log_ratio: float, dtype, row: int = 1):
    """Two rows of 4 tokens, the last one padding; token [row, 1] has the given log-ratio, the others ~0.
    Row 1 has A < 0, where no PPO clip bounds the ratio term."""
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -1.2, -0.7, 0.0]])
    lp = old.clone()
    lp[row, 1] += log_ratio
    lp[1 - row, 0] += 0.01
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.5, 1.5, 1.5, 0.0], [-1.5, -1.5, -1.5, 0.0]])
    return lp.to(dtype), old.to(dtype), adv.to(dtype), mask


@pytest.mark.parametrize("name", PAPER)
def test_fp16_inputs_with_log_ratio_11_give_the_fp32_loss(name):
    # exp(11) * 1.5 = 89,800 > 65,504 (float16 max): computed in float16 every loss was inf (KL-Cov NaN)
    lp16, old16, adv16, mask = _case(11.0, torch.float16)
    assert not torch.isfinite(-adv16 * torch.exp(lp16 - old16)).all()  # the finding: fp16 arithmetic overflows
    m = harness.get_method(name, **({"k_ratio": 0.2} if name == "kl_cov" else {}))
    kw = {"entropy": torch.full((2, 4), 0.7)} if m.needs_entropy else {}
    lp = lp16.clone().requires_grad_()
    out16 = m.policy_loss(lp, old16, adv16, mask, generator=torch.Generator().manual_seed(0), **kw)
    out32 = m.policy_loss(
        lp16.float(), old16.float(), adv16.float(), mask, generator=torch.Generator().manual_seed(0), **kw
    )
    assert out16.loss.dtype == torch.float32 and torch.isfinite(out16.loss)
    assert out16.loss.item() == out32.loss.item()
    out16.loss.backward()
    assert lp.grad.dtype == torch.float16 and torch.isfinite(lp.grad.float()).all()


def test_kl_cov_fp16_value_by_hand():
    lp, old, adv, mask = _case(11.0, torch.float16, row=0)
    m = harness.get_method("kl_cov", k_ratio=1 / 6)  # K = 1 of 6 valid tokens
    out = m.policy_loss(lp, old, adv, mask)
    r = torch.exp(lp.float() - old.float())
    expected = (-adv.float() * r * mask).sum() / 6
    # the top-covariance token is [0, 1] (largest A and log pi above their means): + beta * |log r| there
    expected = expected + 1.0 * float((lp.float() - old.float())[0, 1]) / 6
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert out.metrics["log_ratio/max_abs"] == pytest.approx(11.0, abs=0.01)


@pytest.mark.parametrize("name", PAPER)
def test_log_ratio_89_in_fp32_raises_naming_the_method_and_the_log_ratio(name):
    # exp(89) = 4.5e38 > float32 max 3.4e38: the ratio is inf
    lp, old, adv, mask = _case(89.0, torch.float32)
    m = harness.get_method(name)
    kw = {"entropy": torch.full((2, 4), 0.7)} if m.needs_entropy else {}
    with pytest.raises(
        FloatingPointError, match=rf"method {name}: the loss is not finite .* largest log-ratio .*: 89 "
    ):
        m.policy_loss(lp.requires_grad_(), old, adv, mask, generator=torch.Generator().manual_seed(0), **kw)


def test_log_ratio_88_in_fp32_is_still_finite():
    lp, old, adv, mask = _case(88.0, torch.float32)  # exp(88) = 1.65e38: representable
    out = harness.get_method("grpo", eps_high=1e9).policy_loss(lp, old, adv, mask)
    assert math.isfinite(out.loss.item())


def test_prime_advantages_ignore_nan_padding():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    prm = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-1.0, -1.5, -0.2], [-0.1, -0.3, 0.0]])
    ref = prm - torch.tensor([[0.2, -0.1, 0.0], [0.3, 0.0, 0.0], [0.1, 0.2, -0.4], [0.5, 0.1, 0.0]])
    scores, groups = torch.tensor([1.0, 0.0, 1.0, 0.0]), [0, 0, 1, 1]
    m = harness.get_method("prime")
    clean = m.advantages(scores, groups, mask, prm_log_probs=prm, ref_log_probs=ref)
    pad = ~mask.bool()
    nan_prm, nan_ref = prm.masked_fill(pad, float("nan")), ref.masked_fill(pad, float("nan"))
    dirty = m.advantages(scores, groups, mask, prm_log_probs=nan_prm, ref_log_probs=nan_ref)
    assert torch.isfinite(dirty).all() and torch.equal(dirty, clean)
    assert clean.abs().sum() > 0
    from harness.baselines.prime import prm_loss

    lp = nan_prm.clone().requires_grad_()
    loss = prm_loss(lp, nan_ref, mask, scores)
    assert torch.isfinite(loss) and loss.item() == prm_loss(prm, ref, mask, scores).item()
    loss.backward()
    assert torch.isfinite(lp.grad).all() and torch.all(lp.grad[pad] == 0)


def test_nan_on_a_valid_token_is_named():
    lp, old, adv, mask = _case(0.0, torch.float32)
    old[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"old_log_probs has a non-finite value .* at \[1, 2\]"):
        harness.get_method("grpo").policy_loss(lp, old, adv, mask)


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0, float("nan")])
def test_mask_values_other_than_0_1_are_refused(bad):
    lp, old, adv, mask = _case(0.0, torch.float32)
    mask[0, 0] = bad
    with pytest.raises(ValueError, match="mask must hold only 0/1"):
        harness.get_method("grpo").policy_loss(lp, old, adv, mask)


def test_a_negative_entropy_is_refused_naming_the_token():
    """Issue 29 item 12: a negated entropy passed as entropy= trained silently (the bonus then lowered entropy).
    Log-probs are not sign-checked: the loss reads them in log-ratio space, where the method tests' hand-worked
    inputs (log r = ln 4 as log_probs over old_log_probs = 0) are legitimate."""
    m = harness.get_method("entropy_bonus")
    mask = torch.ones(2, 3)
    lp, adv = -torch.rand(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"entropy\[1, 2\] = -0.5: an entropy must be >= 0"):
        m.policy_loss(lp, lp, adv, mask, entropy=torch.tensor([[0.1, 0.2, 0.3], [0.1, 0.2, -0.5]]))
    # rounding at 0 is fine (bf16), and padding may hold anything
    ent = torch.tensor([[0.1, -1e-3, -7.0], [0.1, 0.2, 0.3]])
    fine = m.policy_loss(lp, lp, adv, torch.tensor([[1, 1, 0], [1, 1, 1]]), entropy=ent)
    assert torch.isfinite(fine.loss)
