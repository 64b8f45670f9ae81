"""QAE, Quantile Advantage Estimation (Wu et al. 2025, arXiv 2509.22611, ICLR 2026).

Estimator ``qae``: verl's ``compute_grpo_outcome_advantage`` with the group mean replaced by the group's K-quantile,
the README's "one-line core change" of ``junkangwu/QAE`` (``torch.quantile(scores_tensor, quantile_k)``); everything
else is verl's GRPO: A_i = (s_i - Q_K(s))/(std(s) + 1e-6), std the unbiased group std (``std_normalize: false``:
A_i = s_i - Q_K(s)), the same A on every response token; a 1-response group has baseline 0 and std 1. Any loss takes
it: ``get_method("kl_cov", advantage="qae")``. For 0/1 rewards the quantile gates by success rate p: hard groups
(p <= 1 - K) have baseline 0 (only successes get A > 0), easy groups baseline 1 (only failures get A < 0).

``interpolation``: ``torch.quantile``'s rule. ``linear`` (default, the official call) breaks the clean gate where
K(n - 1) is fractional: n = 8, K = 0.4 with 5 of 8 correct gives baseline 0.8, not the paper's 1; ``higher`` gives
the paper's gate at that boundary (``lower``, ``nearest``, ``midpoint`` as torch). Defaults: K = 0.4 (the README's
``++algorithm.quantile_k=0.4``), std normalisation on (verl's ``norm_adv_by_std_in_grpo`` default).
Method ``qae``: this estimator with the DAPO recipe's loss that the README says QAE only adds one flag to: PPO clip
0.2/0.28, dual clip c = 10, token-mean (verl ``recipe/dapo`` scripts; the ``recipe/qae/*.sh`` scripts themselves
were not read: inferred).
Differs from official: the repository (no commit pinned: it is not in the store here) was read through its README;
that std normalisation is kept is inferred from "no other algorithmic changes". The official code falls back to
the group mean for K outside (0, 1); here K must lie in (0, 1) (the mean is ``advantage: grpo``).
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, register_advantage, register_method

torch = lazy_import("torch")

QAE_EPS = 1e-6  # verl's epsilon in compute_grpo_outcome_advantage
INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")


def _open_unit(k) -> str | None:
    return None if 0 < k < 1 else "K must lie in (0, 1) (the official code falls back to the mean there: use grpo)"


QAE_OPTIONS = {
    "k": opt(0.4, "K: the quantile of the group's scores used as the baseline (README: 0.4)", check=_open_unit),
    "std_normalize": opt(True, "divide by the unbiased group std + 1e-6 (verl norm_adv_by_std_in_grpo)"),
    "interpolation": opt(
        "linear", "torch.quantile's rule (linear: official; higher: the paper's gate)", choices=INTERPOLATIONS
    ),
}


def group_quantile(scores: torch.Tensor, group: torch.Tensor, n_groups: int, k: float, interpolation: str):
    """(B,) the K-quantile of each sample's group (``torch.quantile`` per group), 0 for a 1-response group."""
    from harness.kernel.ops import group_stats

    count = group_stats(scores, group, n_groups)[0]
    out = torch.zeros_like(scores)
    order = torch.argsort(group, stable=True)
    for idx in torch.split(order, torch.bincount(group, minlength=n_groups).tolist()):
        if idx.numel() > 1:
            out[idx] = torch.quantile(scores[idx], k, interpolation=interpolation)
    return torch.where(count == 1, torch.zeros_like(out), out)


@register_advantage("qae", options=QAE_OPTIONS)
def qae_advantage(scores, group, n_groups, mask, options):
    """(s - Q_K(group))/(group std + 1e-6) on every response token (QAE); a 1-response group: s / 1."""
    from harness.kernel.ops import group_stats

    s = scores.float()
    count, _, _, std = group_stats(s, group, n_groups)
    adv = s - group_quantile(s, group, n_groups, float(options["k"]), options["interpolation"])
    if options["std_normalize"]:
        adv = adv / (torch.where(count == 1, torch.ones_like(std), std) + QAE_EPS)
    return adv[:, None] * mask


@register_method("qae")
class QAE(Method):
    """QAE advantages (K = 0.4 quantile baseline) + the DAPO loss: PPO clip 0.2/0.28, dual clip 10 (inferred)."""

    advantage: str = opt("qae", "advantage estimator (see harness.list_advantages())")
    eps_high: float = opt(0.28, "PPO clip: ratio <= 1 + eps_high (DAPO recipe: 0.28)", low=0.0)
    clip_ratio_c: float = opt(
        10.0, "dual-clip constant for A < 0 (verl DAPO recipe: 10); 0 = none", low=1.0, low_open=True, off=0.0
    )
