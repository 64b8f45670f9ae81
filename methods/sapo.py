"""SAPO (Qwen, arXiv 2511.20347): a soft, temperature-controlled gate on the ratio instead of a hard clip.

loss_t = -f(r_t) * A_t with f(r) = (4/tau) * sigmoid(tau (r - 1)); tau = tau_pos where A > 0, tau_neg where
A <= 0. f(1) = 2/tau and f'(1) = 1, so an on-policy step is the plain policy gradient; far from r = 1 the
gradient decays smoothly instead of being cut. Defaults tau_pos 1.0, tau_neg 1.05 (verl ``actor.yaml``
``tau_pos``/``tau_neg``, ``core_algos.py::compute_policy_loss_sapo``; TRL ``sapo_temperature_pos/neg``), log-ratio
clamped to [-20, 20] (verl; TRL does not clamp), aggregation seq-mean-token-mean (verl forces it and leaves empty
rows out; TRL's ``loss_type="sapo"`` takes the mean of the rows' token means over every row: ``empty_rows: count``).
No ``eps_low``/``eps_high`` (the gate has no clip range; configs written before record the inherited 0.2, accepted
and ignored so their run ids hold; any other value is refused).
Differs from official: ``agg`` may be changed here. No token is ever "clipped" (clipfrac is 0).
"""

from __future__ import annotations

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import MethodBase, TokenLoss, register_method

torch = lazy_import("torch")

LOG_RATIO_CLAMP = 20.0


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """f(r) = (4/tau) * sigmoid(tau * (r - 1))."""
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


@register_method("sapo")
class SAPO(MethodBase):
    """GRPO advantages; soft sigmoid gate on the ratio (tau_pos 1.0, tau_neg 1.05), seq-mean-token-mean."""

    retired_hparams = {"eps_low": 0.2, "eps_high": 0.2}
    retired_reason = "SAPO's soft gate has no clip range"

    tau_pos: float = opt(1.0, "gate temperature where A > 0", low=0.0, low_open=True)
    tau_neg: float = opt(1.05, "gate temperature where A <= 0", low=0.0, low_open=True)
    agg: str = opt("seq-mean-token-mean", "loss aggregation (verl forces seq-mean-token-mean)", choices=ops.AGG_MODES)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        ratio = torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        tau = torch.where(advantages > 0, torch.full_like(ratio, self.tau_pos), torch.full_like(ratio, self.tau_neg))
        return TokenLoss(-sapo_gate(ratio, tau) * advantages, clipped=torch.zeros_like(mask, dtype=torch.bool))
