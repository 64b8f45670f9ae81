"""Our plugged loss and advantages equal OpenRLHF 0.11.2's built-in ones on the same tensors.

grpo / rloo / clip_higher / clip_low / entropy_bonus: loss value and gradient vs
``openrlhf.models.loss.PolicyLoss`` (plus its entropy term, ``aggregate_loss(entropy, mask, **loss_batch_info)``),
with the global normalisers OpenRLHF passes (dp_size, batch_num_tokens, global_batch_size) and both aggregation
modes; advantages vs upstream's ``RemoteExperienceMaker.compute_advantages_and_returns`` (group_norm, rloo).
"""

import pytest
import torch
from orl_testlib import experience_maker

pytestmark = pytest.mark.openrlhf


BUILTIN = {  # method config -> (OpenRLHF eps low/high, entropy coef)
    "grpo": ({"name": "grpo"}, (0.2, 0.2), None),
    "rloo": ({"name": "rloo"}, (0.2, 0.2), None),
    "clip_higher": ({"name": "clip_higher"}, (0.2, 0.28), None),
    "clip_low": ({"name": "clip_low"}, (0.1, 0.2), None),
    "entropy_bonus": ({"name": "entropy_bonus", "coef": 0.01}, (0.2, 0.2), 0.01),
}


def _tensors(seed=0, B=6, T=9):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(T)[None] < torch.tensor([9, 7, 5, 9, 2, 6])[:, None]).float()
    old = -torch.rand(B, T, generator=g) * 3
    lp = (old + torch.randn(B, T, generator=g) * 0.4).requires_grad_(True)  # ratios well outside [0.8, 1.28]
    adv = torch.randn(B, generator=g)[:, None].expand(B, T) * mask
    ent = (torch.rand(B, T, generator=g) * 2).requires_grad_(True)
    return lp, old, adv, mask, ent


CASES = [
    (n, agg)
    for n in BUILTIN
    for agg in ("token-mean", "seq-mean-token-mean")
    if not (BUILTIN[n][2] is not None and agg != "token-mean")
]  # OpenRLHF's entropy term is always token-level


@pytest.mark.parametrize("name,agg", CASES)
def test_plugged_loss_equals_builtin(name, agg, configure):
    from openrlhf.models.loss import PolicyLoss, aggregate_loss

    from harness.backends.openrlhf.plugin import STATE, make_policy_loss_class

    method, eps, coef = BUILTIN[name]
    configure({**method, "agg": agg})
    norms = {"dp_size": 2, "batch_num_tokens": torch.tensor(57.0), "global_batch_size": torch.tensor(11.0)}
    kwargs = dict(clip_eps_low=eps[0], clip_eps_high=eps[1], token_level_loss=agg == "token-mean")

    lp, old, adv, mask, ent = _tensors()
    ref, ref_clip, ref_kl, *_ = PolicyLoss(**kwargs)(lp, old, adv, action_mask=mask, **norms)
    if coef is not None:
        ref = ref - coef * aggregate_loss(ent, mask, **norms)
    ref_grads = torch.autograd.grad(ref, [lp, ent], allow_unused=True)

    lp2, old2, adv2, mask2, ent2 = _tensors()
    STATE.entropy = ent2
    ours, clip, kl, vllm_kl, ratio = make_policy_loss_class(PolicyLoss)(**kwargs)(
        lp2, old2, adv2, action_mask=mask2, **norms
    )
    grads = torch.autograd.grad(ours, [lp2, ent2], allow_unused=True)
    STATE.entropy = None

    assert vllm_kl is None and ratio is None
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grads[0], ref_grads[0], rtol=1e-5, atol=1e-7)
    if coef is not None:
        torch.testing.assert_close(grads[1], ref_grads[1], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(clip, ref_clip, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kl, ref_kl, rtol=1e-5, atol=1e-6)


def test_eps_really_differs_so_the_test_can_fail(configure):
    """Sanity: the same tensors give a different loss with clip-higher than with GRPO."""
    from openrlhf.models.loss import PolicyLoss

    lp, old, adv, mask, _ = _tensors()
    a = PolicyLoss(0.2, 0.2)(lp, old, adv, action_mask=mask)[0]
    b = PolicyLoss(0.2, 0.28)(lp, old, adv, action_mask=mask)[0]
    assert abs(float((a - b).detach())) > 1e-4


def test_micro_batch_accumulation_equals_mini_batch_token_mean(configure):
    """Two micro-batches with OpenRLHF's window normalisers sum to the method's token-mean over the union."""
    from openrlhf.models.loss import PolicyLoss

    import harness
    from harness.backends.openrlhf.plugin import make_policy_loss_class

    configure({"name": "clip_higher"})
    lp, old, adv, mask, _ = _tensors(seed=3)
    n_tokens = mask.sum()
    loss_fn = make_policy_loss_class(PolicyLoss)(0.2, 0.28)
    total = sum(
        loss_fn(
            lp[r],
            old[r],
            adv[r],
            action_mask=mask[r],
            dp_size=1,
            batch_num_tokens=n_tokens,
            global_batch_size=torch.tensor(6.0),
        )[0]
        for r in (slice(0, 2), slice(2, 6))
    )
    whole = harness.get_method("clip_higher").policy_loss(lp, old, adv, mask).loss
    torch.testing.assert_close(total, whole, rtol=1e-5, atol=1e-7)


_maker = experience_maker


def _experiences(n=4, groups=3, seed=0):
    """Rollout split into micro-batches of 5 (groups straddle them), shuffled index order, ragged widths."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    total = n * groups
    rewards = (torch.rand(total, generator=g) > 0.5).float()
    rewards[:n] = 1.0  # one group with all-equal rewards (advantage 0, std 0)
    order = torch.randperm(total, generator=g).tolist()
    exps = []
    for start in range(0, total, 5):
        idx = order[start : start + 5]
        width = 4 + start // 5
        lengths = torch.randint(1, width + 1, (len(idx),), generator=g)
        mask = torch.arange(width)[None] < lengths[:, None]
        exps.append(
            Experience(
                action_mask=mask,
                rewards=rewards[idx].clone(),
                kl=torch.zeros(len(idx), width),
                action_log_probs=-torch.rand(len(idx), width, generator=g) * mask,
                index=list(idx),
                info={},
            )
        )
    return exps


@pytest.mark.parametrize("name,estimator", [("grpo", "group_norm"), ("rloo", "rloo"), ("clip_higher", "group_norm")])
def test_plugged_advantages_equal_builtin(name, estimator, configure):
    import openrlhf.trainer.ppo_utils.experience_maker as em

    from harness.backends.openrlhf import plugin

    configure({"name": name})
    cls = em.RemoteExperienceMaker
    builtin = getattr(cls.compute_advantages_and_returns, "__wrapped_original__", cls.compute_advantages_and_returns)
    ref = builtin(_maker(estimator, 4), _experiences())
    ours = plugin.harness_advantages(_experiences(), 4)
    assert len(ours) == len(ref)
    nonzero = 0
    for a, e in zip(ours, ref):
        torch.testing.assert_close(a, e.advantages.float() * e.action_mask, rtol=1e-5, atol=2e-6)
        nonzero += int((a.abs() > 1e-3).sum())
    assert nonzero > 0


def test_patched_compute_replaces_advantages_and_logs_cov_term(configure):
    """The patched method keeps upstream's bookkeeping (returns, info) and writes our advantages + cov/term."""
    from harness.backends.openrlhf import hook, plugin

    configure({"name": "rloo"})
    hook.install()
    import openrlhf.trainer.ppo_utils.experience_maker as em

    assert getattr(em, hook.PATCHED_FLAG, False)
    exps = em.RemoteExperienceMaker.compute_advantages_and_returns(_maker("rloo", 4), _experiences())
    expected = plugin.harness_advantages(_experiences(), 4)
    for e, a in zip(exps, expected):
        torch.testing.assert_close(e.advantages, a)
        assert e.returns is not None and "return" in e.info
        assert e.info["cov/term"].shape == (e.action_mask.shape[0],)
    cov = exps[0].info["cov/term"][0].item()
    a = torch.cat([e.advantages[e.action_mask] for e in exps])
    lp = torch.cat([e.action_log_probs[e.action_mask] for e in exps])
    assert cov == pytest.approx(float(((a - a.mean()) * (lp - lp.mean())).mean()), rel=1e-5)


@pytest.mark.parametrize("eps,scale", [((3e-4, 4e-4), 1e-3), ((0.2, 0.28), 1.0)])
def test_gspo_equals_native_gspo(eps, scale, configure):
    """Our gspo (level sequence, seq-mean-token-mean) = OpenRLHF's ``PolicyLoss(policy_loss_type="gspo")``: the
    same geometric-mean ratio per response (no log-ratio clamp in either), clip, ``-min(surr1, surr2)``, seq-mean
    normaliser, clip ratio and KL. The log-ratios are scaled so that some sequences are clipped and some are not
    at each eps (the paper's 3e-4/4e-4 and 0.2/0.28): the gradient through the sequence ratio is compared."""
    from openrlhf.models.loss import PolicyLoss

    from harness.backends.openrlhf.plugin import make_policy_loss_class

    configure({"name": "gspo", "eps_low": eps[0], "eps_high": eps[1]})
    norms = {"dp_size": 2, "batch_num_tokens": torch.tensor(57.0), "global_batch_size": torch.tensor(11.0)}
    kwargs = dict(clip_eps_low=eps[0], clip_eps_high=eps[1], token_level_loss=False, policy_loss_type="gspo")
    lp, old, adv, mask, _ = _tensors(seed=4)
    lp_small = (old + (lp.detach() - old) * scale).requires_grad_(True)
    ref, ref_clip, ref_kl, *_ = PolicyLoss(**kwargs)(lp_small, old, adv, action_mask=mask, **norms)
    (ref_grad,) = torch.autograd.grad(ref, lp_small)
    lp2 = lp_small.detach().clone().requires_grad_(True)
    ours, clip, kl, *_ = make_policy_loss_class(PolicyLoss)(**kwargs)(lp2, old, adv, action_mask=mask, **norms)
    (grad,) = torch.autograd.grad(ours, lp2)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(clip, ref_clip, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kl, ref_kl, rtol=1e-5, atol=1e-6)
    assert 0 < float(ref_clip) < 1 and float(grad.abs().sum()) > 0  # both branches occur: the test can fail


def test_native_gspo_forces_seq_mean_so_token_mean_gspo_is_ours_alone():
    """Why gspo with ``agg: token-mean`` launches as ``ppo`` (our loss): OpenRLHF's gspo overrides
    ``token_level_loss`` to seq-mean-token-mean, a different number on ragged responses."""
    from openrlhf.models.loss import PolicyLoss

    import harness

    lp, old, adv, mask, _ = _tensors(seed=4)
    native = PolicyLoss(0.2, 0.28, token_level_loss=True, policy_loss_type="gspo")
    assert native.token_level_loss is False
    value = native(lp, old, adv, action_mask=mask)[0]
    ours = harness.get_method("gspo", eps_low=0.2, eps_high=0.28, agg="token-mean").policy_loss(lp, old, adv, mask)
    seq = harness.get_method("gspo", eps_low=0.2, eps_high=0.28).policy_loss(lp, old, adv, mask)
    torch.testing.assert_close(seq.loss, value, rtol=1e-5, atol=1e-7)
    assert abs(float((ours.loss - value).detach())) > 1e-4


def _top_entropy(ent, mask, rho=0.2):
    """The official selection by hand: the k = max(1, int(n rho + 0.9999)) highest-entropy valid tokens."""
    n = int(mask.sum())
    k = max(1, int(n * rho + 0.9999))
    flat = ent.detach().masked_fill(mask == 0, -float("inf")).flatten()
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    chosen[flat.topk(k).indices] = True
    return chosen.view(mask.shape), k, n


@pytest.mark.parametrize("normalize", ["selected", "all"])
def test_high_entropy_tokens_is_builtin_dapo_loss_on_the_top_tokens(normalize, configure):
    """high_entropy_tokens through the plug-in = OpenRLHF's own PolicyLoss (0.2/0.28, dual-clip 10) whose
    action_mask is the top-20% entropy tokens, normalised by the selected tokens (official) or all (paper)."""
    from openrlhf.models.loss import PolicyLoss

    from harness.backends.openrlhf.plugin import STATE, make_policy_loss_class

    configure({"name": "high_entropy_tokens", "normalize": normalize})
    lp, old, adv, mask, ent = _tensors(seed=6)
    chosen, k, n = _top_entropy(ent, mask)
    denominator = torch.tensor(float(k if normalize == "selected" else n))
    builtin = PolicyLoss(0.2, 0.28, dual_clip=10.0)
    ref = builtin(lp, old, adv, action_mask=chosen.float(), batch_num_tokens=denominator)[0]
    (ref_grad,) = torch.autograd.grad(ref, lp)

    lp2 = lp.detach().clone().requires_grad_(True)
    STATE.entropy = ent.detach()
    try:
        out = make_policy_loss_class(PolicyLoss)(0.2, 0.28)(
            lp2, old, adv, action_mask=mask, dp_size=1, batch_num_tokens=mask.sum(), global_batch_size=None
        )
    finally:
        STATE.entropy = None
    (grad,) = torch.autograd.grad(out[0], lp2)
    torch.testing.assert_close(out[0], ref, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-8)
    assert int((grad != 0).sum()) <= k < int(mask.sum())  # gradient only on the selected tokens


def test_w_reinforce_advantages_through_the_patched_maker(configure):
    """The patched compute_advantages_and_returns (launched as OpenRLHF's baseline-free `reinforce`) gives
    W-REINFORCE's advantages: +0.1 on every token of a correct response, -1 on a wrong one, no whitening."""
    from harness.backends.openrlhf import hook

    configure({"name": "w_reinforce"})
    hook.install()
    import openrlhf.trainer.ppo_utils.experience_maker as em

    exps = em.RemoteExperienceMaker.compute_advantages_and_returns(_maker("reinforce", 4), _experiences())
    for e, fresh in zip(exps, _experiences()):
        want = torch.where(fresh.rewards == 1, 0.1, -1.0)[:, None] * fresh.action_mask
        torch.testing.assert_close(e.advantages, want)
