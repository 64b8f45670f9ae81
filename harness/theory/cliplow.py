"""Park et al. 2025 (arXiv 2509.26114): "clip-low increases entropy, clip-high decreases it", with random rewards.

A softmax contextual bandit (tabular logits, float64) trained by GRPO + PPO clip on rewards that ignore the action
(Bernoulli 1/2): the expected policy gradient is 0, so whatever entropy does comes from sampling noise and from the
clipping. Each rollout: G samples per state, group-normalised advantages, several epochs of mini-batch SGD on the
logits (off-policy updates, so the clip acts). Clipped tokens are found with the harness's own
``ppo_clip_token_loss``; the gradient d loss/dz = coef (e_a - pi) is exact.

Two measurements, per seed (paired: every configuration sees the same seeds and the same random streams at step 0):
* the trajectory: policy entropy over steps for no clip, symmetric 0.2/0.2, a tighter clip-low (eps_low 0.1), a
  raised eps_low (0.4: a *looser* clip-low) and clip-higher (0.2/0.28);
* the attribution: at every update, the first-order entropy change (Lemma IV.2, -Cov_pi(log pi, dz)) carried by
  the gradient the clip removed, split into the clip-low part (A < 0, r < 1 - eps_low) and the clip-high part
  (A > 0, r > 1 + eps_high); summed over the run. Removing a gradient changes entropy by minus its effect.
"""

from __future__ import annotations

import math

import torch

from harness.kernel.method import ppo_clip_token_loss

from .claim import claim
from .softmax import DT

CONFIGS = {
    "no clip": (100.0, 100.0),
    "symmetric 0.2/0.2": (0.2, 0.2),
    "tighter clip-low 0.1/0.2": (0.1, 0.2),
    "raised eps_low 0.4/0.2": (0.4, 0.2),
    "clip-higher 0.2/0.28": (0.2, 0.28),
}
SETUP = {
    "seeds": 128,
    "steps": 60,
    "states": 4,
    "actions": 20,
    "group": 8,
    "epochs": 2,
    "minibatches": 4,
    "lr": 2.0,
    "logit_scale": 4.0,
}
SCALES = (1.0, 2.0, 4.0, 6.0)  # initial logit std: flat (H ~ 2.6 nats) ... peaked (H ~ 0.6 nats), K = 20


def logit_grad(lp: torch.Tensor, rows, states, actions, coef: torch.Tensor) -> torch.Tensor:
    """d/dz of sum_j coef_j log pi(a_j|s_j) for tabular logits z (R,S,K): coef_j (e_{a_j} - pi(.|s_j))."""
    grad = torch.zeros_like(lp)
    grad.index_put_((rows.expand_as(actions), states.expand_as(actions), actions), coef, accumulate=True)
    per_state = torch.zeros(lp.shape[:2], dtype=lp.dtype).index_add_(1, states, coef)
    return grad - per_state[..., None] * lp.exp()


def first_order_dh(lp: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """Lemma IV.2 per run: -Cov_pi(log pi, dz), averaged over states -> (R,)."""
    p = lp.exp()
    mean_lp, mean_dz = (p * lp).sum(-1, keepdim=True), (p * dz).sum(-1, keepdim=True)
    return -(p * (lp - mean_lp) * (dz - mean_dz)).sum(-1).mean(-1)


def simulate(
    eps_low: float,
    eps_high: float,
    *,
    seeds=64,
    steps=40,
    states=4,
    actions=20,
    group=8,
    epochs=2,
    minibatches=4,
    lr=2.0,
    logit_scale=2.0,
    seed=0,
) -> dict:
    """Entropy trajectory (steps+1, R) and per-run summed first-order entropy effect of clip-low / clip-high."""
    g = torch.Generator().manual_seed(seed)
    R, S, K, G = seeds, states, actions, group
    z = torch.randn(R, S, K, generator=g, dtype=DT) * logit_scale
    rows = torch.arange(R)[:, None]
    H = torch.empty(steps + 1, R, dtype=DT)
    effect = {"clip_low": torch.zeros(R, dtype=DT), "clip_high": torch.zeros(R, dtype=DT)}
    frac, n_upd = {"clip_low": 0.0, "clip_high": 0.0}, 0
    for step in range(steps + 1):
        lp = torch.log_softmax(z, -1)
        H[step] = -(lp.exp() * lp).sum(-1).mean(-1)
        if step == steps:
            break
        act = torch.multinomial(lp.exp().reshape(R * S, K), G, replacement=True, generator=g).reshape(R, S, G)
        reward = (torch.rand(R, S, G, generator=g, dtype=DT) < 0.5).to(DT)
        adv = (reward - reward.mean(-1, keepdim=True)) / (reward.std(-1, keepdim=True) + 1e-6)
        old = lp.gather(-1, act)
        for _ in range(epochs):
            for chunk in torch.randperm(S * G, generator=g).chunk(minibatches):
                s, j = chunk // G, chunk % G
                lp = torch.log_softmax(z, -1)
                a = act[:, s, j]
                new = lp[rows, s, a]
                A = adv[:, s, j]
                _, clipped = ppo_clip_token_loss(new, old[:, s, j], A, eps_low, eps_high)
                ratio = torch.exp(new - old[:, s, j])
                pg = -A * ratio / len(chunk)  # d(mean loss)/d log pi where unclipped
                kept = torch.where(clipped, torch.zeros_like(pg), pg)
                for key, side in (("clip_low", A < 0), ("clip_high", A > 0)):
                    removed = torch.where(clipped & side, pg, torch.zeros_like(pg))
                    # clipping removes the step -lr * grad(removed): its entropy effect, sign flipped
                    effect[key] -= first_order_dh(lp, -lr * logit_grad(lp, rows, s, a, removed))
                    frac[key] += float((clipped & side).to(DT).mean())
                n_upd += 1
                z = z - lr * logit_grad(lp, rows, s, a, kept)
    return {"H": H, "effect": effect, "clipfrac": {k: v / n_upd for k, v in frac.items()}}


def _ci(x: torch.Tensor) -> tuple[float, float]:
    return float(x.mean()), float(1.96 * x.std() / math.sqrt(x.numel()))


def fmt(config: dict) -> str:
    m, ci = config["end_minus_symmetric"]
    return f"{m:+.3f} +- {ci:.3f}"


def fmt_net(regimes: list[dict]) -> str:
    return ", ".join(
        f"H0 {x['entropy_start']:.2f}: {x['net_effect'][0]:+.2f} +- {x['net_effect'][1]:.2f}" for x in regimes
    )


def park_cliplow() -> dict:
    # 1. attribution at symmetric 0.2/0.2 from flat to peaked policies
    regimes = []
    for scale in SCALES:
        r = simulate(0.2, 0.2, **{**SETUP, "seeds": 256, "steps": 40, "logit_scale": scale})
        low, high = r["effect"]["clip_low"], r["effect"]["clip_high"]
        regimes.append(
            {
                "logit_scale": scale,
                "entropy_start": float(r["H"][0].mean()),
                "entropy_end": float(r["H"][-1].mean()),
                "clip_low_effect": _ci(low),
                "clip_high_effect": _ci(high),
                "net_effect": _ci(low + high),
                "clipfrac_low": r["clipfrac"]["clip_low"],
                "clipfrac_high": r["clipfrac"]["clip_high"],
            }
        )
    # 2. trajectories in the peaked regime, paired against symmetric clipping
    runs = {name: simulate(lo, hi, **SETUP) for name, (lo, hi) in CONFIGS.items()}
    base = runs["symmetric 0.2/0.2"]["H"]
    configs = {
        name: {
            "eps_low_high": CONFIGS[name],
            "entropy_start": float(r["H"][0].mean()),
            "entropy_end": float(r["H"][-1].mean()),
            "end_minus_symmetric": _ci(r["H"][-1] - base[-1]),
            "clip_low_effect": _ci(r["effect"]["clip_low"]),
            "clip_high_effect": _ci(r["effect"]["clip_high"]),
            "entropy_curve": [float(h) for h in r["H"].mean(-1)],
        }
        for name, r in runs.items()
    }
    signs = all(
        x["clip_low_effect"][0] - x["clip_low_effect"][1] > 0
        and x["clip_high_effect"][0] + x["clip_high_effect"][1] < 0
        for x in regimes
    )
    peaked = [x for x in regimes if x["entropy_start"] < 1.0]
    flat = [x for x in regimes if x["entropy_start"] >= 1.5]
    high_dominates_peaked = all(x["net_effect"][0] + x["net_effect"][1] < 0 for x in peaked)
    low_dominates_flat = all(x["net_effect"][0] - x["net_effect"][1] > 0 for x in flat)
    ok = signs and high_dominates_peaked and bool(peaked)
    tighter, raised = configs["tighter clip-low 0.1/0.2"], configs["raised eps_low 0.4/0.2"]
    return claim(
        "park_cliplow",
        "With random rewards, clip-low raises entropy and clip-high lowers it; with symmetric eps the clip-high "
        "effect dominates, so entropy falls; a more aggressive clip-low raises entropy",
        "holds under conditions" if ok else "does not hold as stated",
        {
            "setup": SETUP,
            "scales": list(SCALES),
            "regimes_symmetric": regimes,
            "configs_peaked": configs,
            "signs_hold": signs,
            "clip_high_dominates_when_peaked": high_dominates_peaked,
            "clip_low_dominates_when_flat": low_dominates_flat,
        },
        experiment="softmax contextual bandit (4 states x 20 actions, logits N(0, s^2)), Bernoulli(1/2) rewards "
        "independent of the action, GRPO advantages over 8 samples per state, 2 epochs x 4 mini-batches "
        "of SGD (lr 2) on the logits per rollout; clip masks from the harness's ppo_clip_token_loss; "
        "(1) at 0.2/0.2 for s = 1, 2, 4, 6 (256 seeds, 40 rollouts): the first-order entropy effect "
        "(Lemma IV.2) of the gradient each clip side removes, summed over the run; (2) at s = 4 (start "
        "entropy ~0.9 nats; 128 paired seeds, 60 rollouts): entropy over steps for five clip settings",
        conditions=(
            f"the per-update signs hold at every scale, but clip-high dominates only for peaked policies "
            f"(start entropy < 1 nat, the LLM regime; net first-order effect at 0.2/0.2: {fmt_net(peaked)}); for "
            f"flatter ones clip-low dominates ({fmt_net(flat)}). On whole trajectories the sampling noise of "
            f"random rewards lowers entropy by itself and any clipping damps it (end entropy, no clip minus "
            f"symmetric: {fmt(configs['no clip'])}); a *raised* eps_low is a looser clip-low and ends with "
            f"less entropy ({fmt(raised)}); the entropy-raising knob is a tighter clip-low, eps_low 0.1 "
            f"({fmt(tighter)})"
        ),
        supported=None if ok else "see evidence: the per-side signs and which side dominates at each scale",
        note="+- are 95% CIs over seeds (paired differences for end entropy); effects are in nats summed over "
        "the run. The issue's 'raised eps_low' reads the paper's 'more aggressive clip-low' the wrong way round",
        figure="cliplow.png",
    )
