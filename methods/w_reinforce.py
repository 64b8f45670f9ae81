"""W-REINFORCE (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement", arXiv 2506.01347).

Advantage estimator ``w_reinforce`` (``TianHongZXY/RLVR-Decomposed``,
``verl/trainer/ppo/core_algos.py::compute_psr_nsr_outcome_advantage``, ``advantage="weighted"``): no group
baseline; a correct response (score 1) gets A = lambda, a wrong one (score 0) A = -1, on every response token.
lambda = 0.1 (``run_*_psr_nsr.sh``: positive_advantage_weight=0.1 for W-REINFORCE). Any other score keeps
A = score, exactly as the official code (it only rewrites scores equal to 1 or 0). Combine it with any loss:
``get_method("clip_cov", advantage="w_reinforce")``. Method ``w_reinforce``: this estimator + PPO clip 0.2/0.2,
token-mean (the official runs: verl's PPO loss, no KL).
``recipe="official"`` adds what the released runs train with beyond the paper: an entropy bonus of 0.001 (verl's
trainer default ``entropy_coeff: 0.001``, never overridden by the ``run_*_psr_nsr.sh`` scripts; ``dp_actor``
subtracts 0.001 x the token mean of the entropy, ``masked_mean``), so the method then needs the entropy.
``recipe="paper"`` (default) is the loss without it.
Differs from official: the official computes discounted returns of a last-token reward (gamma 1: the same A on
every token); PSR/NSR (training on only the correct / only the wrong responses) are not offered.
"""

from __future__ import annotations

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, register_advantage, register_method

torch = lazy_import("torch")

OFFICIAL_ENTROPY_COEF = 0.001  # verl's entropy_coeff default in the release's trainer config

W_REINFORCE_OPTIONS = {"positive_weight": opt(0.1, "lambda: the advantage of a correct response", low=0.0)}


@register_advantage("w_reinforce", options=W_REINFORCE_OPTIONS)
def w_reinforce_advantage(scores, group, n_groups, mask, options):
    """lambda on correct responses (score 1), -1 on wrong ones (score 0), the score otherwise; no baseline."""
    s = scores.float()
    adv = torch.where(s == 1, s * options["positive_weight"], torch.where(s == 0, s - 1.0, s))
    return adv[:, None] * mask


@register_method("w_reinforce")
class WReinforce(Method):
    """W-REINFORCE advantages (+lambda correct, -1 wrong, lambda 0.1) + PPO clip (0.2, 0.2)."""

    advantage: str = opt("w_reinforce", "advantage estimator (see harness.list_advantages())")
    recipe: str = opt(
        "paper",
        "paper: PPO clip alone; official: - 0.001 x token-mean entropy too (the released config)",
        choices=("paper", "official"),
        late=True,
    )

    @property
    def needs_entropy(self) -> bool:
        return self.recipe == "official"

    def extra_loss(self, loss, entropy, mask):
        if self.recipe != "official":
            return loss
        if entropy is None:
            raise ValueError(
                "w_reinforce with recipe: official needs the per-token entropy: call policy_loss(..., entropy=H) "
                "with H (B,T) from harness.entropy_from_logits(logits / temperature), differentiable"
            )
        return loss - OFFICIAL_ENTROPY_COEF * ops.agg_loss(entropy, mask, "token-mean")
