"""W-REINFORCE (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement", arXiv 2506.01347).

Advantage estimator ``w_reinforce`` (``TianHongZXY/RLVR-Decomposed``,
``verl/trainer/ppo/core_algos.py::compute_psr_nsr_outcome_advantage``, ``advantage="weighted"``): no group
baseline; a correct response (score 1) gets A = lambda, a wrong one (score 0) A = -1, on every response token.
lambda = 0.1 (``run_*_psr_nsr.sh``: positive_advantage_weight=0.1 for W-REINFORCE). Any other score keeps
A = score, exactly as the official code (it only rewrites scores equal to 1 or 0). Combine it with any loss:
``get_method("clip_cov", advantage="w_reinforce")``. Method ``w_reinforce``: this estimator + PPO clip 0.2/0.2,
token-mean (the official runs: verl's PPO loss, no KL).
Differs from official: the official computes discounted returns of a last-token reward (gamma 1: the same A on
every token); PSR/NSR (training on only the correct / only the wrong responses) are not offered.
"""

import torch

from harness.method import Method, hparam, register_advantage, register_method

W_REINFORCE_OPTIONS = {"positive_weight": 0.1}


@register_advantage("w_reinforce", options=W_REINFORCE_OPTIONS)
def w_reinforce_advantage(scores, group, n_groups, mask, options):
    """lambda on correct responses (score 1), -1 on wrong ones (score 0), the score otherwise; no baseline."""
    s = scores.float()
    adv = torch.where(s == 1, s * options["positive_weight"], torch.where(s == 0, s - 1.0, s))
    return adv[:, None] * mask


@register_method("w_reinforce")
class WReinforce(Method):
    """W-REINFORCE advantages (+lambda correct, -1 wrong, lambda 0.1) + PPO clip (0.2, 0.2)."""

    advantage: str = hparam("w_reinforce", "advantage estimator (see harness.list_advantages())")
