"""Clip-low (Park et al. 2025, "Clip-Low Increases Entropy and Clip-High Decreases Entropy in Reinforcement Learning of
Large Language Models", arXiv 2509.26114): a tighter lower clip as an entropy dial.

The loss is the plain PPO clip with decoupled bounds, clip(r, 1 - eps_low, 1 + eps_high): nothing new to compute.
The paper shows that the lower clip (A < 0, r < 1 - eps_low) raises entropy and the upper clip (A > 0,
r > 1 + eps_high) lowers it, that with symmetric eps the upper clip wins (entropy falls even under random rewards),
and that "a more aggressive clip-low" prevents the collapse: a *smaller* eps_low, which clips more of the
negative-advantage updates. (``next_methods.md`` §7, "a larger eps_low", has the direction backwards; the harness's
bandit claim ``park_cliplow`` measures the same direction as the paper, docs/theory.md.)
Defaults eps_low 0.1, eps_high 0.2: INFERRED, not the paper's values. The paper's experiment settings could not be
read here (only the abstract and introduction of arXiv 2509.26114v1 are stored; no code was released); 0.1/0.2 is
the setting the theory lab measured to raise entropy against 0.2/0.2. A clip is a no-op strictly on-policy (r = 1):
the effect needs ``updates_per_rollout > 1``. ``eps_high: 0.28`` adds DAPO's clip-higher.
Differs from official: no official code; the bounds are inferred (above).
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.method import Method, register_method


@register_method("clip_low")
class ClipLow(Method):
    """GRPO advantages; PPO clip with a tighter lower bound, eps_low 0.1 / eps_high 0.2 (inferred)."""

    eps_low: float = opt(0.1, "PPO clip: ratio >= 1 - eps_low (tighter clip-low raises entropy; 0.1 inferred)", low=0.0)
