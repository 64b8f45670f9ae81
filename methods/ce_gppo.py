"""CE-GPPO (Su et al. 2025, arXiv 2509.20712): PPO clip that keeps a bounded gradient on clipped tokens.

Per token (``Kwai-Klear/CE-GPPO``, ``verl/trainer/ppo/core_algos.py::compute_gppo_loss_general_beta``):
  r < 1 - eps_low and A < 0:   -beta1 (1 - eps_low) (r / sg(r)) A     value as PPO's clipped branch x beta1,
  r > 1 + eps_high and A > 0:  -beta2 (1 + eps_high) (r / sg(r)) A    gradient beta (1 -/+ eps) A grad log pi
  otherwise:                   -r A                                   (PPO's unclipped branch)
then dual-clip for A < 0: min(-A c, loss) with c = clip_ratio_c. beta1 = beta2 = 1 is Klear-Reasoner's GPPO;
PPO drops the clipped tokens' gradient entirely. Defaults: the 7B script
``recipe/dapo/7B_perf_run_gppo_v1_beta1_075_beta2_1_ours_math.sh``: beta1 0.75 (1.5B script: 0.5; yaml
default 0.25), beta2 1, eps 0.2/0.2, clip_ratio_c 10. clipfrac counts the two clipped regions (official).
Differs from official: nothing known.
"""

import torch

from harness.method import Method, TokenLoss, hparam, register_method


def dual_clip(loss: torch.Tensor, advantages: torch.Tensor, c: float) -> torch.Tensor:
    """Dual-clip PPO (Ye et al. 2019): for A < 0 the per-token loss is capped at -A * c."""
    return torch.where(advantages < 0, torch.minimum(loss, -advantages * c), loss)


@register_method("ce_gppo")
class CEGPPO(Method):
    """GRPO advantages; PPO clip whose clipped tokens keep a beta-scaled gradient; dual-clip c = 10."""

    beta1: float = hparam(0.75, "gradient scale on clipped tokens with r < 1 - eps_low, A < 0 (7B script)", low=0.0)
    beta2: float = hparam(1.0, "gradient scale on clipped tokens with r > 1 + eps_high, A > 0", low=0.0)
    clip_ratio_c: float = hparam(10.0, "dual-clip constant c for A < 0 (official scripts: 10)", low=1.0, low_open=True)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        ratio = torch.exp(log_probs - old_log_probs)
        unit = ratio / ratio.detach()  # value 1, gradient grad log pi
        low = (ratio < 1.0 - self.eps_low) & (advantages < 0)
        high = (ratio > 1.0 + self.eps_high) & (advantages > 0)
        loss = torch.where(
            low,
            -self.beta1 * (1.0 - self.eps_low) * unit * advantages,
            torch.where(high, -self.beta2 * (1.0 + self.eps_high) * unit * advantages, -ratio * advantages),
        )
        return TokenLoss(dual_clip(loss, advantages, self.clip_ratio_c), clipped=(low | high) & mask.bool())
