"""Conventions that change a covariance method silently (docs/conventions.md, "Covariance methods: three silent
conventions"): what a KL-Cov token fraction means in each code base, and whether the covariance carries gradient
(official Entropy-Mechanism issue #9). Per-micro-batch vs global selection (issues #14, #20) is
tests/foundation/test_scope.py."""

import pytest
import torch

import harness
from harness.kernel import ops


def _batch(n_rows=10, width=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(n_rows, width, generator=g) * 4
    adv = torch.randn(n_rows, 1, generator=g).expand(n_rows, width).clone()
    return lp, adv, torch.ones(n_rows, width)


@pytest.mark.parametrize(
    "peer_value,reading,k_ratio,selected",
    [
        (0.2, "SkyRL kl_cov_frac: a fraction", 0.2, 200),
        (0.2, "official k_percent: a percentage", 0.2 / 100, 2),
        (0.02, "official k_percent (32B scripts)", 0.02 / 100, 1),  # int(0.2) = 0, at least one token
    ],
)
def test_the_same_number_selects_100x_more_tokens_in_skyrl(peer_value, reading, k_ratio, selected):
    lp, adv, mask = _batch()  # N = 1000 valid tokens
    m = harness.get_method("kl_cov", k_ratio=k_ratio)
    chosen = m.selection_rule(lp, lp, adv, mask)
    assert int(chosen.sum()) == selected == max(1, int(1000 * k_ratio)), reading
    if "SkyRL" in reading:  # SkyRL's max(1, int(N * kl_cov_frac)) is ours with k_ratio = kl_cov_frac
        assert selected == max(1, int(1000 * peer_value))
    else:  # the official max(1, int(N * k_percent / 100)) is ours with k_ratio = k_percent / 100
        assert selected == max(1, int(1000 * peer_value / 100))


def official_clip_cov(lp, old, adv, mask, clip_ratio, lb, ub, generator, eps=1.0):
    """Clip-Cov as the official fork (and SkyRL, verl) computes it: cov_all multiplies the *non-detached* log_prob
    (issue #9), then is only compared and used to pick the detached tokens."""
    ratio = torch.exp(lp - old)
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps)
    clipped = (l2 > l1) & (mask > 0)
    m = mask
    cov = (adv - (adv * m).sum() / (m.sum() + 1e-8)) * (lp - (lp.detach() * m).sum() / (m.sum() + 1e-8))
    cov = cov.masked_fill(mask == 0, -torch.inf).masked_fill(clipped, -torch.inf)
    n_clip = max(int(clip_ratio * mask.sum().item()), 1)
    idx = torch.nonzero((cov < ub) & (cov > lb) & (mask > 0))
    idx = idx[torch.randperm(len(idx), generator=generator)[: min(n_clip, len(idx))]]
    corr = torch.ones_like(adv)
    corr[idx[:, 0], idx[:, 1]] = 0
    assert cov.requires_grad  # the official covariance is in the autograd graph ...
    return ((torch.maximum(l1, l2) * corr * m).sum() / (m.sum() + 1e-8)), corr == 0


def test_our_covariance_carries_no_gradient_and_the_official_graph_is_harmless():
    """Issue #9 asks whether log_prob should be detached inside the covariance. Ours is detached
    (``ops.token_covariance``): the covariance has no graph and the selection does not depend on whether the
    log-probs require grad. The official non-detached covariance is only compared, never part of the loss: Clip-Cov's
    loss and gradient are the same either way (same draw from the same generator state)."""
    lp, adv, mask = _batch(6, 40, seed=3)
    adv = adv * 3  # covariances in Clip-Cov's (1, 5) window
    old = lp + (torch.rand(lp.shape, generator=torch.Generator().manual_seed(4)) - 0.5) * 0.2
    leaf = lp.clone().requires_grad_()
    assert ops.token_covariance(adv, leaf, mask).grad_fn is None
    m = harness.get_method("clip_cov", clip_ratio=0.05)
    sel_grad = m.selection_rule(leaf, old, adv, mask, torch.Generator().manual_seed(0))
    sel_plain = m.selection_rule(lp, old, adv, mask, torch.Generator().manual_seed(0))
    assert torch.equal(sel_grad, sel_plain) and int(sel_plain.sum()) >= 1

    ours_lp = lp.clone().requires_grad_()
    out = m.policy_loss(ours_lp, old, adv, mask, generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    theirs_lp = lp.clone().requires_grad_()
    loss, detached = official_clip_cov(theirs_lp, old, adv, mask, 0.05, 1.0, 5.0, torch.Generator().manual_seed(0))
    loss.backward()
    assert int(detached.sum()) == out.metrics["selected/count"] >= 1
    assert out.loss.item() == pytest.approx(loss.item(), abs=1e-6)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=0, atol=1e-8)
    assert bool((theirs_lp.grad[detached] == 0).all())  # the detached tokens: no gradient, covariance or not
