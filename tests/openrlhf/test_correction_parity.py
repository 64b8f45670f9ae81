"""The method's ``rollout_correction`` equals OpenRLHF 0.11.2's own is_correction_* on the same batch: upstream's
``openrlhf.models.loss.PolicyLoss`` with the correction on against our plug-in loss (``HarnessPolicyLoss``, the
method's ``policy_loss`` under OpenRLHF's global normalisers) and the bare method: loss, gradient, ``vllm_kl`` and
``is_filter_ratio``, for TIS, ICEPOP, seq-mask-tis and the binary-KL / TV trust regions, on the worked example of
tests/methods/test_rollout_correction.py and on random ragged batches in both aggregation modes.

    PYTHONPATH=$PWD .venv-openrlhf/bin/python tests/openrlhf/test_correction_parity.py   # the max |diff| per scheme
"""

import math

import pytest
import torch

pytestmark = pytest.mark.openrlhf

L = math.log
# scheme -> (method rollout_correction, upstream PolicyLoss keywords)
SCHEMES = {
    "tis": ("tis", dict(is_correction_level="token", is_correction_mode="clip")),
    "icepop": ("icepop", dict(is_correction_level="token", is_correction_mode="mask")),
    "seq_mask": ("seq_mask", dict(is_correction_level="seq", is_correction_mode="mask")),
    "tis_band": (
        {"scheme": "tis", "low": 0.8, "high": 1.25},
        dict(is_correction_level="token", is_correction_mode="clip", is_correction_threshold=[0.8, 1.25]),
    ),
    "token_binary_kl": (
        {"level": "token", "gating": "binary_kl", "high": 0.2},
        dict(is_correction_level="token", is_correction_gating="binary_kl", is_correction_threshold=[0.0, 0.2]),
    ),
    "seq_binary_kl": (
        {"level": "seq", "gating": "binary_kl", "high": 0.2},
        dict(is_correction_level="seq", is_correction_gating="binary_kl", is_correction_threshold=[0.0, 0.2]),
    ),
    "seq_tv": (
        {"level": "seq", "gating": "tv", "high": 0.2},
        dict(is_correction_level="seq", is_correction_gating="tv", is_correction_threshold=[0.0, 0.2]),
    ),
}
UPSTREAM_DEFAULT = dict(is_correction_mode="mask", is_correction_gating="ratio", is_correction_threshold=[0.5, 5.0])


def upstream_kwargs(scheme, token_level=True):
    return {**UPSTREAM_DEFAULT, **SCHEMES[scheme][1], "token_level_loss": token_level}


def _example():
    delta = torch.tensor([[0.0, L(2), -L(4)], [L(8), L(8), L(2)]], dtype=torch.float64)
    old = torch.tensor([[-2.6, -2.7, -2.8], [-2.9, -3.0, -3.1]], dtype=torch.float64)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    return old.clone(), old, adv, torch.ones(2, 3, dtype=torch.float64), old - delta


def _random(seed, B=8, T=12):
    """Ragged right-padded responses (one padding-only row excluded: upstream's seq statistic is 0/0 there), an
    off-policy current policy, and rollout log-probs off by a row shift in [-1.5, 1] nats plus ~0.5 per token, so
    that every scheme filters some units.
    A rollout log-prob above 0 is a probability upstream clamps to 1 - 1e-6 (the divergence gates), as ours."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    old = -0.5 - torch.rand(B, T, generator=g) * 3
    lp = old + torch.randn(B, T, generator=g) * 0.3
    shift = torch.rand(B, 1, generator=g) * 4.5 - 2.5  # a row's mean mismatch: some rows leave the seq gates
    rollout = old + shift + torch.randn(B, T, generator=g) * 0.5
    adv = torch.randn(B, 1, generator=g).expand(B, T) * mask
    return lp, old, adv, mask, rollout


def _upstream(scheme, tensors, token_level=True, norms=None):
    from openrlhf.models.loss import PolicyLoss

    lp, old, adv, mask, rollout = tensors
    lp = lp.clone().requires_grad_(True)
    out = PolicyLoss(**upstream_kwargs(scheme, token_level))(
        lp, old, adv, action_mask=mask, rollout_log_probs=rollout, **(norms or {})
    )
    (grad,) = torch.autograd.grad(out[0], lp)
    return out, grad


def _plugin(scheme, tensors, configure, token_level=True, norms=None):
    from openrlhf.models.loss import PolicyLoss

    from harness.backends.openrlhf.plugin import make_policy_loss_class

    configure({"name": "grpo", "agg": "token-mean" if token_level else "seq-mean-token-mean",
               "rollout_correction": SCHEMES[scheme][0]})  # fmt: skip
    lp, old, adv, mask, rollout = tensors
    lp = lp.clone().requires_grad_(True)
    out = make_policy_loss_class(PolicyLoss)(**upstream_kwargs(scheme, token_level))(
        lp, old, adv, action_mask=mask, rollout_log_probs=rollout, **(norms or {})
    )
    (grad,) = torch.autograd.grad(out[0], lp)
    return out, grad


def _assert_same(ours, theirs, rtol):
    (loss, clip, kl, vllm_kl, filt), grad = ours
    (ref, ref_clip, ref_kl, ref_vllm_kl, ref_filt), ref_grad = theirs
    torch.testing.assert_close(loss, ref, rtol=rtol, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=rtol, atol=1e-7)
    torch.testing.assert_close(clip.double(), ref_clip.double(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(kl.double(), ref_kl.double(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(vllm_kl.double(), ref_vllm_kl.double(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(filt.double(), ref_filt.double(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "scheme,loss,filtered", [("tis", 8.5 / 6, 0.5), ("icepop", -1 / 6, 0.5), ("seq_mask", -3.25 / 6, 0.5)]
)
def test_the_worked_example_against_upstream(scheme, loss, filtered, configure):
    """Upstream's PolicyLoss gives the hand values (1.416667, -0.166667, -0.541667; half filtered); the plug-in and
    the bare method give upstream's numbers."""
    import harness

    theirs = _upstream(scheme, _example())
    assert theirs[0][0].item() == pytest.approx(loss, rel=1e-12)
    assert theirs[0][4].item() == filtered and theirs[0][3].item() == pytest.approx(-L(2), rel=1e-12)
    _assert_same(_plugin(scheme, _example(), configure), theirs, rtol=1e-7)
    lp, old, adv, mask, rollout = _example()
    lp.requires_grad_(True)
    out = harness.get_method("grpo", rollout_correction=SCHEMES[scheme][0]).policy_loss(
        lp, old, adv, mask, rollout_log_probs=rollout
    )
    (grad,) = torch.autograd.grad(out.loss, lp)
    torch.testing.assert_close(out.loss, theirs[0][0], rtol=1e-7, atol=0)
    torch.testing.assert_close(grad, theirs[1], rtol=1e-7, atol=1e-12)


SEEDS = (0, 1, 3, 4)  # seed 2 filters no row under the seq divergence gates
CASES = [(s, t, seed) for s in SCHEMES for t in (True, False) for seed in SEEDS]


def _norms(mask):
    return {"dp_size": 2, "batch_num_tokens": mask.sum() * 3, "global_batch_size": torch.tensor(24.0)}


@pytest.mark.parametrize("scheme,token_level,seed", CASES)
def test_random_batches_against_upstream(scheme, token_level, seed, configure):
    """With the global normalisers OpenRLHF passes (dp_size 2, the window's tokens or samples)."""
    tensors = _random(seed)
    norms = _norms(tensors[3])
    theirs = _upstream(scheme, tensors, token_level, norms)
    assert 0 < theirs[0][4].item() < 1, "every scheme must filter part of the batch, or the test proves little"
    _assert_same(_plugin(scheme, tensors, configure, token_level, norms), theirs, rtol=1e-5)


def test_the_correction_really_changes_the_loss(configure):
    """Sanity: the same batch without the correction gives another loss and gradient than with each scheme."""
    from openrlhf.models.loss import PolicyLoss

    lp, old, adv, mask, rollout = _random(0)
    plain = PolicyLoss()(lp, old, adv, action_mask=mask)[0]
    for scheme in SCHEMES:
        assert abs(float(_upstream(scheme, (lp, old, adv, mask, rollout))[0][0].detach() - plain)) > 1e-4, scheme


def test_the_plugin_refuses_to_run_the_correction_without_rollout_log_probs(configure):
    from openrlhf.models.loss import PolicyLoss

    from harness.backends.openrlhf.plugin import make_policy_loss_class

    configure({"name": "grpo", "rollout_correction": "icepop"})
    lp, old, adv, mask, _ = _random(0)
    with pytest.raises(RuntimeError, match="carries no rollout log-probs"):
        make_policy_loss_class(PolicyLoss)(is_correction_level="token")(lp, old, adv, action_mask=mask)


if __name__ == "__main__":  # the max |ours - upstream| of loss and gradient per scheme, over the random batches
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from harness.backends.openrlhf.rehearsal import stubs

    stubs.install()
    torch.compile = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)  # noqa: E731
    from orl_testlib import plugin_config

    from harness.backends.openrlhf import plugin

    def configure(method):
        plugin.configure(plugin_config(method))

    print("worked example (float64): scheme | upstream loss | ours | abs diff loss | max abs diff gradient")
    for scheme in ("tis", "icepop", "seq_mask"):
        theirs, ours = _upstream(scheme, _example()), _plugin(scheme, _example(), configure)
        dl, dg = float((ours[0][0] - theirs[0][0]).detach().abs()), float((ours[1] - theirs[1]).abs().max())
        print(f"{scheme} | {float(theirs[0][0].detach()):.6f} | {float(ours[0][0].detach()):.6f} | {dl:.2e} | {dg:.2e}")
    print(
        "random batches (float32, 4 seeds, dp 2 with the window's normalisers): scheme | aggregation | max abs diff "
        "loss | max abs diff gradient | upstream is_filter_ratio per seed"
    )
    for scheme in SCHEMES:
        for token_level in (True, False):
            dl = dg = 0.0
            fractions = []
            for seed in SEEDS:
                tensors = _random(seed)
                theirs = _upstream(scheme, tensors, token_level, _norms(tensors[3]))
                ours = _plugin(scheme, tensors, configure, token_level, _norms(tensors[3]))
                dl = max(dl, float((ours[0][0] - theirs[0][0]).detach().abs()))
                dg = max(dg, float((ours[1] - theirs[1]).abs().max()))
                fractions.append(f"{float(theirs[0][4]):.3f}")
            agg = "token-mean" if token_level else "seq-mean-token-mean"
            print(f"{scheme} | {agg} | {dl:.2e} | {dg:.2e} | {', '.join(fractions)}")
