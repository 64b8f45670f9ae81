"""CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a clipped, detached importance weight.

loss_t = -sg(clip(r_t, lo, hi)) * A_t * log pi(y_t), token-mean; no token is ever dropped, the gradient is
sg(r_hat) * A * grad log pi. Two conventions for the bounds (``convention``):
  verl (``core_algos.py::compute_policy_loss_cispo``): lo = 1 - eps_low, hi = 1 + eps_high; defaults from
       ``examples/cispo_trainer/run_cispo_qwen2_5_0_5b_gsm8k.sh``: eps_low 10 (no floor), eps_high 0.2 (cap 1.2);
       the log-ratio is clamped to [-20, 20] first, as verl does.
  trl  (``grpo_trainer.py::_compute_loss``, ``loss_type="cispo"``): ``clamp(r, max=eps_high)``: eps_high is an
       absolute cap and there is no floor (eps_low is ignored). TRL's docs recommend eps_high 5.0; left unset
       it falls back to epsilon = 0.2, which caps every weight at 0.2 (a 5x smaller on-policy step).
The loss value uses log pi (not a ratio), so it is not comparable to PPO's loss value; its gradient is.
A clipping method with its own ``eps_*`` (bounds of the IS weight), not a PPO clip: no dual clip or
``log_ratio_clamp`` option (the verl convention clamps at 20 always).
Differs from official: nothing known (MiniMax released no training code; its eps_high is not public).
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import MethodBase, TokenLoss, register_method

torch = lazy_import("torch")

CONVENTIONS = ("verl", "trl")
LOG_RATIO_CLAMP = 20.0


def cispo_bounds(convention: str, eps_low: float, eps_high: float) -> tuple[float | None, float]:
    """(floor or None, cap) on the IS weight under each framework's reading of eps."""
    if convention == "trl":
        return None, eps_high
    return 1.0 - eps_low, 1.0 + eps_high


@register_method("cispo")
class CISPO(MethodBase):
    """GRPO advantages; -sg(clip(r)) * A * log pi (REINFORCE with a clipped IS weight), token-mean."""

    eps_low: float = opt(10.0, "verl convention: weight >= 1 - eps_low (verl example: 10 = no floor)", low=0.0)
    eps_high: float = opt(0.2, "verl: weight <= 1 + eps_high; trl: weight <= eps_high (absolute cap)", low=0.0)
    convention: str = opt(
        "verl", "how eps bounds the IS weight: verl (1 +/- eps) or trl (absolute cap)", choices=CONVENTIONS
    )

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        log_ratio = log_probs - old_log_probs
        if self.convention == "verl":
            log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = torch.exp(log_ratio.detach())
        floor, cap = cispo_bounds(self.convention, self.eps_low, self.eps_high)
        weight = ratio.clamp(min=floor, max=cap)
        loss = -weight * advantages * log_probs
        return TokenLoss(
            loss,
            clipped=(weight != ratio) & mask.bool(),
            metrics={"cispo/weight_mean": float((weight * mask).sum() / mask.sum().clamp_min(1))},
        )
