"""RLOO (Ahmadian et al. 2024): A_i = s_i - mean of the other responses to the same prompt.

Computed as (n s_i - sum_g) / (n - 1), verl's form. A group of one response keeps its score (verl).
Loss: PPO clip (0.2, 0.2), token-mean.
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, register_advantage, register_method

torch = lazy_import("torch")


@register_advantage("rloo")
def rloo_advantage(scores, group, n_groups, mask, options):
    """Leave-one-out baseline, broadcast over the response tokens."""
    from harness.kernel.ops import group_stats

    count, total, _, _ = group_stats(scores, group, n_groups)
    s = scores.float()
    adv = torch.where(count > 1, (count * s - total) / (count - 1).clamp_min(1), s)
    return adv[:, None] * mask


@register_method("rloo")
class RLOO(Method):
    """RLOO advantages + PPO clip (0.2, 0.2)."""

    advantage: str = opt("rloo", "advantage estimator (see harness.list_advantages())")
