"""GRPO (Shao et al. 2024) as the entropy-mechanism scripts run it (verl ``compute_grpo_outcome_advantage``).

A_i = (s_i - mean_g) / (std_g + 1e-6) on every response token, std_g the unbiased (N-1) group std.
A group of one response uses mean 0 and std 1 (verl). ``std_normalize=False`` gives Dr. GRPO's s_i - mean_g.
Loss: PPO clip with eps_low = eps_high = 0.2, token-mean; no dual-clip, no log-ratio clamp, no KL (the official
scripts' settings; ``clip_ratio_c: 3`` and ``log_ratio_clamp: 20`` give verl's and OpenRLHF's, docs/conventions.md).
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, register_advantage, register_method

torch = lazy_import("torch")

GRPO_EPS = 1e-6


@register_advantage("grpo", options={"std_normalize": opt(True, "divide by the group std (False: Dr. GRPO)")})
def grpo_advantage(scores, group, n_groups, mask, options):
    """Group-normalised outcome advantage, broadcast over the response tokens."""
    from harness.kernel.ops import group_stats

    count, _, mean, std = group_stats(scores, group, n_groups)
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = scores.float() - mean
    if options["std_normalize"]:
        adv = adv / (std + GRPO_EPS)
    return adv[:, None] * mask


@register_method("grpo")
class GRPO(Method):
    """GRPO: group-normalised advantages + PPO clip (0.2, 0.2)."""
