"""Dual-clip PPO (Ye et al. 2019) as a new method: one file, registers itself. Save it as methods/dual_clip.py."""

import torch

from harness import Method, TokenLoss, hparam, ppo_clip_token_loss, register_method


@register_method("dual_clip")
class DualClip(Method):
    """GRPO advantages; PPO clip; for A < 0 the loss is also capped at -A * clip_c."""

    clip_c: float = hparam(3.0, "dual-clip constant c (> 1)", low=1.0, low_open=True)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        loss, clipped = ppo_clip_token_loss(log_probs, old_log_probs, advantages, self.eps_low, self.eps_high)
        capped = torch.minimum(loss, -advantages * self.clip_c)
        return TokenLoss(torch.where(advantages < 0, capped, loss), clipped=clipped & mask.bool())
