"""Issue 38's methods against re-derivations of their public code, on random inputs (off-policy ratios beyond the
clip ranges, padding, singleton groups, micro-batches of different sizes): value and gradient agree to float32
rounding. Each ``official_*`` function below restates, step by step, what the named file does at the named commit
(read for issue 38; docs/methods.md lists them); the harness methods are independent implementations."""

import math

import pytest
import torch

import harness

EPS = 1e-6


def masked_mean(x, m):  # verl_F.masked_mean
    return (x * m).sum() / (m.sum() + 1e-8)


def verl_dual_clip_ppo(lp, old, adv, eps_low, eps_high, c):
    """verl's vanilla PPO loss per token as the STEER, ERC and EntroPIC forks have it: log-ratio clamped to +/-20,
    clipped surrogate, dual clip c for A < 0. Returns (per-token loss, ratio)."""
    ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clip1 = torch.maximum(l1, l2)
    return torch.where(adv < 0, torch.min(-adv * c, clip1), clip1), ratio


def _inputs(seed, b=6, t=7, spread=0.6):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3 - 0.01
    lp = old + (torch.rand(b, t, generator=g) - 0.5) * 2 * spread  # ratios from ~0.55 to ~1.8
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    h_old = torch.rand(b, t, generator=g) * 2
    h_new = h_old * (1 + (torch.rand(b, t, generator=g) - 0.5) * 0.2)  # ratios 0.9 .. 1.1
    return lp, old, adv, mask, h_old, h_new


def _ours(method, lp, old, adv, mask, **kw):
    lp = lp.clone().requires_grad_()
    out = method.policy_loss(lp, old, adv, mask, **kw)
    out.loss.backward()
    return out.loss.item(), lp.grad


def _theirs(fn, lp, *args):
    lp = lp.clone().requires_grad_()
    loss = fn(lp, *args)
    loss.backward()
    return loss.item(), lp.grad


# -- QAE: junkangwu/QAE README's change inside verl's compute_grpo_outcome_advantage ------------------------------
def official_qae(scores, index, k, norm=True):
    """Per prompt index: 1 response -> mean 0, std 1; else baseline torch.quantile(scores, k) (0 < k < 1) and
    torch.std; A = (s - b)/(std + 1e-6) or s - b."""
    groups = {}
    for i, idx in enumerate(index):
        groups.setdefault(idx, []).append(scores[i])
    base, std = {}, {}
    for idx, vals in groups.items():
        if len(vals) == 1:
            base[idx], std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            st = torch.stack(vals)
            base[idx], std[idx] = torch.quantile(st, k), torch.std(st)
    out = scores.clone()
    for i, idx in enumerate(index):
        out[i] = (scores[i] - base[idx]) / (std[idx] + EPS) if norm else scores[i] - base[idx]
    return out


@pytest.mark.parametrize("k", [0.4, 0.25, 0.8])
@pytest.mark.parametrize("norm", [True, False])
def test_qae_matches_the_official_estimator(k, norm):
    g = torch.Generator().manual_seed(3)
    index = [0] * 8 + [1] * 5 + [2] + [3] * 4 + [4] * 8  # group sizes 8, 5, 1, 4, 8
    scores = torch.randint(0, 2, (len(index),), generator=g).float()
    scores[18:] = torch.rand(8, generator=g) * 3  # one group with continuous rewards
    perm = torch.randperm(len(index), generator=g)  # responses of a prompt need not be adjacent
    scores, index = scores[perm], [index[i] for i in perm]
    m = harness.get_method(
        "grpo", advantage="qae", std_normalize=True, advantage_options={"k": k, "std_normalize": norm}
    )
    ours = m.advantages(scores, index, torch.ones(len(index), 3))
    want = official_qae(scores, index, k, norm)
    torch.testing.assert_close(ours, want[:, None].expand(-1, 3), rtol=0, atol=2e-6)


# -- STEER: zz-haooo/STEER b31df71, core_algos.py compute_token_weights + compute_policy_loss_with_entropy ------------
def official_steer(lp, old, adv, mask, entropys, w_min, w_max, linear, eps_low=0.2, eps_high=0.28, c=10.0):
    with torch.no_grad():
        x = torch.clamp(torch.exp(lp), 1e-8, 1 - 1e-8)
        f = x * (1 - x) * (torch.log(x) + entropys)
        metric = adv / torch.clamp(torch.exp(old), 1e-8, 1.0) * f
        metric = torch.where(torch.isfinite(metric), metric, torch.zeros_like(metric)).abs()
        valid = mask.bool()
        vals = metric[valid]
        lo, hi = vals.min(), vals.max()
        if linear:
            w = (
                (w_max - (vals - lo) * ((w_max - w_min) / (hi - lo)))
                if hi > lo
                else torch.full_like(vals, (w_min + w_max) / 2)
            )
            w = torch.clamp(w, w_min, w_max)
        else:
            k = -torch.log(torch.tensor(w_min)) / torch.maximum(hi, torch.tensor(0.02))
            w = torch.clamp(torch.exp(-k * vals), w_min, 1.0)
        weights = torch.zeros_like(metric)
        weights[valid] = w
        weights = weights * mask
    loss, _ = verl_dual_clip_ppo(lp, old, adv, eps_low, eps_high, c)
    return masked_mean(loss * weights, mask)


@pytest.mark.parametrize("mapping,w_min,w_max", [("exp", 0.8, 1.0), ("linear", 0.8, 1.2), ("exp", 0.5, 1.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steer_matches_the_official_loss(mapping, w_min, w_max, seed):
    lp, old, adv, mask, h_old, _ = _inputs(seed)
    m = harness.get_method("steer", mapping=mapping, weight_min=w_min, weight_max=w_max)
    ours = _ours(m, lp, old, adv, mask, old_entropy=h_old)
    theirs = _theirs(official_steer, lp, old, adv, mask, h_old, w_min, w_max, mapping == "linear")
    assert ours[0] == pytest.approx(theirs[0], abs=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-7)


# -- EntroPIC: yk7333/EntroPIC 2470730c, dp_actor.py update_policy + core_algos.py compute_policy_loss_entropic ----
def official_entropic_loss(lp, old, adv, mask, alpha, thresh=0.95, eps=0.2, c=3.0):
    loss, ratio = verl_dual_clip_ppo(lp, old, adv, eps, eps, c)
    prob_mask = mask * (lp > torch.log(torch.tensor(thresh)))
    return masked_mean(loss, mask) + alpha * masked_mean(-ratio * adv.abs(), prob_mask)


def test_entropic_matches_the_official_actor_loop():
    """Two mini-batches of 6 rows, micro-batches of 4 and 2 rows (dynamic batch sizes: the share is rows / mini-batch
    rows), K_p 1, K_i 0.05, target 0.5: alpha, the integral and every micro-batch's loss and gradient agree."""
    lp, old, adv, mask, _, ent = _inputs(5, b=12)
    lp = lp.clone()
    lp[0, :3] = math.log(0.97)  # a few high-probability tokens
    lp[7, :2] = math.log(0.99)
    m = harness.get_method("entropic", k_i=0.05, target_entropy=0.5)
    integral = 0.0
    for mini in (range(0, 6), range(6, 12)):
        mini = list(mini)
        m.begin_mini_batch(mask[mini])
        for rows in (mini[:4], mini[4:]):
            h = masked_mean(ent[rows], mask[rows]).item()  # agg_loss(entropy, token-mean), detached
            alpha = float(torch.clamp(torch.tensor(integral * 0.05 + (h - 0.5) * 1.0), -1.0, 1.0))
            integral += (h - 0.5) * len(rows) / len(mini)
            theirs = _theirs(official_entropic_loss, lp[rows], old[rows], adv[rows], mask[rows], alpha)
            ours = _ours(m, lp[rows], old[rows], adv[rows], mask[rows], entropy=ent[rows])
            assert m.alpha == pytest.approx(alpha, abs=1e-7) and m.integral == pytest.approx(integral, abs=1e-7)
            assert ours[0] == pytest.approx(theirs[0], abs=1e-6)
            torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-7)
    assert abs(m.alpha) > 0.05  # the controller moved


# -- ERC: Kwai-Klear/ERC f1885c5, core_algos.py compute_policy_loss_grpo_erc / _gppo_erc --------------------------
def official_erc(lp, old, adv, mask, h_old, h_new, gppo, eps_low, eps_high, c=10.0, low=0.95, high=1.05):
    if gppo:
        ratio = torch.exp(torch.clamp(lp - old, -20.0, 20.0))
        l1 = -adv * ratio
        l2 = -adv * torch.clamp(ratio, (1 - eps_low) / ratio.detach() * ratio, (1 + eps_high) / ratio.detach() * ratio)
        clip1 = torch.maximum(l1, l2)
        loss = torch.where(adv < 0, torch.min(-adv * c, clip1), clip1)
    else:
        loss, _ = verl_dual_clip_ppo(lp, old, adv, eps_low, eps_high, c)
    rho = (h_new + 1e-8) / (h_old + 1e-8)
    keep = ((rho > low) & (rho < high)) & mask.bool()
    loss = torch.where(keep, loss, loss.detach())
    return masked_mean(loss, mask)


@pytest.mark.parametrize("base,eps_high", [("ppo", 0.28), ("gppo", 0.2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_erc_matches_the_official_loss(base, eps_high, seed):
    lp, old, adv, mask, h_old, h_new = _inputs(seed, spread=1.2)  # ratios 0.3 .. 3.3: both clips and the dual clip
    m = harness.get_method("erc", base=base, eps_high=eps_high)
    ours = _ours(m, lp, old, adv, mask, entropy=h_new, old_entropy=h_old)
    theirs = _theirs(official_erc, lp, old, adv, mask, h_old, h_new, base == "gppo", 0.2, eps_high)
    assert ours[0] == pytest.approx(theirs[0], abs=1e-6)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-7)
    kept = ((h_new + 1e-8) / (h_old + 1e-8) - 1).abs() < 0.05
    assert 0 < int((kept & mask.bool()).sum()) < int(mask.sum())  # the band drops some tokens, keeps others
