"""Clip-higher (DAPO, Yu et al. 2025): GRPO with a wider upper clip, eps_low = 0.2, eps_high = 0.28."""

from harness.kernel.fields import opt
from harness.kernel.method import Method, register_method


@register_method("clip_higher")
class ClipHigher(Method):
    """GRPO advantages; PPO clip with the decoupled upper bound 1 + 0.28 (official 7b_cliphigher script)."""

    eps_high: float = opt(0.28, "PPO clip: ratio <= 1 + eps_high (clip-higher)", low=0.0)
