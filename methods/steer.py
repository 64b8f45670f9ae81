"""STEER (Hao et al. 2025, "Rethinking Entropy Interventions in RLVR: An Entropy Change Perspective",
arXiv 2510.10150): PPO clip with each token's loss weighted down by its estimated entropy change.

Official code ``zz-haooo/STEER`` b31df71 (verl 0.4.1 fork), ``verl/trainer/ppo/core_algos.py::compute_token_weights``
and ``compute_policy_loss_with_entropy`` (loss mode ``entropy_control``), all under ``no_grad`` (weights detached):
  x = clamp(pi(y_t), 1e-8, 1 - 1e-8) (current policy), pi_old = clamp(exp(log pi_old), 1e-8, 1),
  Omega_t = (A_t / pi_old) x (1 - x) (ln x + H_t), H_t the OLD policy's token entropy (the old-log-prob pass's
  ``entropys`` at the rollout temperature: ``old_entropy=``); non-finite Omega -> 0; the weights read |Omega|.
  ``mapping="exp"`` (the paper; ``run/run_exp.sh``): k = -ln(w_min) / max(max|Omega|, 0.02),
  w = clamp(exp(-k |Omega|), w_min, 1), so the largest-|Omega| token gets exactly w_min when max|Omega| >= 0.02.
  ``mapping="linear"`` (``run/run_linear.sh``, the code's default): w = clamp(w_max - (|Omega| - min)(w_max - w_min)
  / (max - min), w_min, w_max), (w_min + w_max)/2 everywhere when max = min.
  max/min over the valid tokens of the call (one micro-batch on one GPU); weights are not renormalised (all <= 1 in
  exp mode, so the step also shrinks). Loss: verl's PPO clip with the log-ratio clamped to +/-20 and dual clip,
  times w, aggregated over every valid token (token-mean).
Defaults (``run/run_exp.sh``): w_min 0.8, w_max 1.0, clip 0.2/0.28, clip_ratio_c 10, log-ratio clamp 20
(``run_linear.sh``: w_max 1.2). The paper's k is derived from w_min and the batch maximum, not a free knob.
Differs from official: the weights are always computed per call (the official micro-batch); no global scope
(selection over the whole mini-batch) is offered. The official trainer drops into an unrelated loss when the old
entropy is missing; here ``policy_loss`` without ``old_entropy=`` raises.
"""

from __future__ import annotations

import math

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method

torch = lazy_import("torch")

MAPPINGS = ("exp", "linear")
OMEGA_FLOOR = 0.02  # the official lower bound on max|Omega| in k


def entropy_change(log_probs, old_log_probs, advantages, old_entropy) -> torch.Tensor:
    """|Omega| per token, the official first-order estimate of the token's entropy change (detached; 0 if not
    finite)."""
    with torch.no_grad():
        x = torch.exp(log_probs.detach()).clamp(1e-8, 1.0 - 1e-8)
        old_prob = torch.exp(old_log_probs.detach()).clamp(1e-8, 1.0)
        omega = advantages.detach() / old_prob * (x * (1 - x)) * (torch.log(x) + old_entropy.detach())
        return torch.where(torch.isfinite(omega), omega, torch.zeros_like(omega)).abs()


def steer_weights(omega: torch.Tensor, mask, mapping: str, w_min: float, w_max: float) -> torch.Tensor:
    """(B,T) token weights from |Omega| over the valid tokens (0 on padding, all 0 without a valid token)."""
    valid = mask.bool()
    weights = torch.zeros_like(omega, dtype=torch.float32)
    values = omega[valid]
    if values.numel() == 0:
        return weights
    low, high = values.min(), values.max()
    if mapping == "linear":
        if high > low:
            w = (w_max - (values - low) * ((w_max - w_min) / (high - low))).clamp(w_min, w_max)
        else:
            w = torch.full_like(values, (w_min + w_max) / 2)
    else:
        k = -math.log(w_min) / torch.clamp(high, min=OMEGA_FLOOR)
        w = torch.exp(-k * values).clamp(w_min, 1.0)
    weights[valid] = w.float()
    return weights


@register_method("steer")
class STEER(Method):
    """GRPO advantages; DAPO clip (0.2/0.28, dual clip 10) x token weights exp(-k |estimated entropy change|)."""

    needs_old_entropy = True
    eps_high: float = opt(0.28, "PPO clip: ratio <= 1 + eps_high (run_exp.sh: 0.28)", low=0.0)
    clip_ratio_c: float = opt(
        10.0, "dual-clip constant for A < 0 (run_exp.sh: 10); 0 = none", low=1.0, low_open=True, off=0.0
    )
    log_ratio_clamp: float = opt(
        20.0, "clamp log pi - log pi_old to [-c, c] (the official loss: 20); 0 = none", low=0.0, low_open=True, off=0.0
    )
    mapping: str = opt("exp", "exp: w = exp(-k |Omega|) (paper, run_exp.sh); linear (run_linear.sh)", choices=MAPPINGS)
    weight_min: float = opt(0.8, "lowest token weight w_min (run_exp.sh: 0.8)", low=0.0, high=1.0, low_open=True)
    weight_max: float = opt(1.0, "linear mapping: highest weight (run_linear.sh: 1.2); exp caps at 1", low=0.0)

    def _validate(self):
        super()._validate()
        if self.weight_max < self.weight_min:
            raise ValueError(f"steer: weight_max={self.weight_max} must be >= weight_min={self.weight_min}")

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, old_entropy=None, **_):
        if old_entropy is None:
            raise ValueError(
                "steer needs the old policy's per-token entropy: call policy_loss(..., old_entropy=H_old) with H_old "
                "(B,T) from the old-log-prob pass at the training temperature (backends pass it: needs_old_entropy)"
            )
        loss, clipped, log_ratio = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        omega = entropy_change(log_probs, old_log_probs, advantages, old_entropy)
        weights = steer_weights(omega, mask, self.mapping, self.weight_min, self.weight_max)
        valid = weights[mask.bool()]
        metrics = {"steer/weight_mean": float(valid.mean())} if valid.numel() else {}
        return TokenLoss(loss * weights, clipped=clipped & mask.bool(), log_ratio=log_ratio, metrics=metrics)
