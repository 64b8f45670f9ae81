"""GSPO (Zheng et al. 2025, arXiv 2507.18071): one importance ratio per sequence, clipped per sequence.

s_i = exp(mean_t (log pi - log pi_old)) over response i's valid tokens (the geometric-mean ratio); per token
loss max(-A s, -A clip(s, 1 - eps_low, 1 + eps_high)), aggregated seq-mean-token-mean by default, so a response
with a sequence-level A contributes exactly the paper's per-sequence term. Defaults: eps 3e-4 / 4e-4 (GSPO paper
v2 section 5.1, as in verl ``examples/gspo_trainer/test_gspo_3b_math.sh`` and TRL ``paper_index.md``), no KL.

``level="sequence"`` (default) lets the gradient flow through s_i (TRL ``importance_sampling_level="sequence"``,
OpenRLHF ``--actor.policy_loss_type gspo``, ``openrlhf/models/loss.py::PolicyLoss``). ``level="token"`` is
GSPO-token (verl ``core_algos.py::compute_policy_loss_gspo``): s_it = sg[s_i] * pi/sg[pi], same value, gradient
s_i * grad log pi(y_t) per token, and log s_it clamped at <= 10 as verl does. The two agree (value and
gradient) when A is constant over each response and agg is seq-mean-token-mean; they differ for token-level
advantages (PRIME, entropy_advantage). GSPO is a no-op on a strictly on-policy update (s = 1).

Aggregation per peer: OpenRLHF forces seq-mean-token-mean for gspo (``token_level_loss = False``) and skips
empty rows; TRL's GSPO divides by every row, empty ones included (``empty_rows: count``); verl 0.9.1 no longer
forces an aggregation for GSPO: it uses the configured ``loss_agg_mode``, token-mean by default
(``agg: token-mean``). The PPO-clip options apply to the sequence ratio: ``clip_ratio_c`` as OpenRLHF's
``--actor.dual_clip`` (which it applies to gspo too), ``log_ratio_clamp`` to the token log-ratios before their
mean (no peer clamps GSPO's; off by default).
Differs from official: nothing known beyond the choice of defaults above (seq-mean-token-mean, skip).
"""

from __future__ import annotations

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method

torch = lazy_import("torch")

LEVELS = ("sequence", "token")
VERL_LOG_RATIO_MAX = 10.0  # verl clamps log s_it at <= 10 "for numerical stability"


def sequence_log_ratio(log_probs, old_log_probs, mask) -> torch.Tensor:
    """(B,1) mean log-ratio per response over its valid tokens (0 for an empty row)."""
    return mean_log_ratio(log_probs - old_log_probs, mask)


def mean_log_ratio(log_ratio, mask) -> torch.Tensor:
    """(B,1) mean of a (B,T) token log-ratio over each response's valid tokens (0 for an empty row)."""
    m = mask.to(log_ratio.dtype)
    return (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1.0)


@register_method("gspo")
class GSPO(Method):
    """GRPO advantages; sequence-level (geometric-mean) ratio clipped per sequence, eps 3e-4/4e-4."""

    eps_low: float = opt(3e-4, "sequence ratio >= 1 - eps_low (GSPO paper: 3e-4)", low=0.0)
    eps_high: float = opt(4e-4, "sequence ratio <= 1 + eps_high (GSPO paper: 4e-4)", low=0.0)
    agg: str = opt(
        "seq-mean-token-mean",
        "loss aggregation (OpenRLHF forces seq-mean-token-mean; verl 0.9.1: its loss_agg_mode, token-mean)",
        choices=ops.AGG_MODES,
    )
    level: str = opt(
        "sequence", "sequence: gradient through s_i (TRL, OpenRLHF); token: GSPO-token (verl)", choices=LEVELS
    )

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        seq = mean_log_ratio(self.clamp_log_ratio(log_probs - old_log_probs), mask)
        if self.level == "sequence":
            log_s = seq.expand_as(log_probs)
        else:
            log_s = (log_probs - log_probs.detach() + seq.detach()).clamp(max=VERL_LOG_RATIO_MAX)
        s = torch.exp(log_s)
        l1 = -advantages * s
        l2 = -advantages * torch.clamp(s, 1.0 - self.eps_low, 1.0 + self.eps_high)
        loss = self.apply_dual_clip(torch.maximum(l1, l2), advantages)
        return TokenLoss(
            loss,
            clipped=(l2 > l1) & mask.bool(),
            metrics={"gspo/seq_ratio_mean": float(seq.detach().exp().mean()) if seq.numel() else 0.0},
        )
