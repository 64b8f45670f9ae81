"""A method and an advantage estimator from outside the harness repository (entry points; test fixture)."""

import torch

from harness.kernel.method import MethodBase, TokenLoss, hparam, register_advantage, register_method


@register_advantage("toy_centred")
def toy_centred(scores, group, n_groups, mask, options):
    """The score minus the batch mean (no per-group baseline, no std)."""
    s = scores.float()
    return (s - s.mean())[:, None] * mask


@register_method("toy_reinforce")
class ToyReinforce(MethodBase):
    """Plain REINFORCE on the toy advantages: -A * log pi per token (no ratio, no clip)."""

    advantage: str = hparam("toy_centred", "advantage estimator")

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        zeros = torch.zeros_like(mask, dtype=torch.bool)
        return TokenLoss(-advantages * log_probs, clipped=zeros, selected=zeros)
