"""Clip-Cov (Cui et al. 2025, §5): detach the gradient of a few random high-covariance tokens.

Official semantics (verl ``compute_policy_loss_clip_cov``): PPO clip with eps_low = eps_high = 1 (range [0, 2]);
tokens already clipped by PPO and padding are excluded; candidates are the tokens with lb < Cov < ub (strict,
1 and 5); max(floor(clip_ratio * N), 1) of them (N = valid tokens) are drawn uniformly (``torch.randperm`` with the
given generator: bit-identical to the official draw for the same RNG state) and their loss is multiplied by 0.
They stay in the token-mean denominator. ``scope="global"`` draws over the whole mini-batch (and all ranks).
A PPO-clip method: ``clip_ratio_c`` and ``log_ratio_clamp`` are available, off as in the official code.
"""

from __future__ import annotations

from harness.kernel.covariance import CovarianceMethod
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method
from harness.kernel.selection import random_subset_mask

torch = lazy_import("torch")


@register_method("clip_cov")
class ClipCov(CovarianceMethod, Method):
    """GRPO advantages; PPO clip (1, 1); zero the loss of random tokens with lb < Cov < ub."""

    eps_low: float = opt(1.0, "PPO clip: ratio >= 1 - eps_low (official Clip-Cov: 1)", low=0.0)
    eps_high: float = opt(1.0, "PPO clip: ratio <= 1 + eps_high (official Clip-Cov: 1)", low=0.0)
    clip_ratio: float = opt(2e-4, "fraction of valid tokens to detach, at least 1", low=0.0, high=1.0)
    cov_lb: float = opt(1.0, "candidates have Cov > cov_lb (strict)")
    cov_ub: float = opt(5.0, "candidates have Cov < cov_ub (strict)")

    def _validate(self):
        super()._validate()
        if self.cov_lb >= self.cov_ub:
            raise ValueError(f"clip_cov: cov_lb={self.cov_lb} must be < cov_ub={self.cov_ub}")

    def selection_rule(self, log_probs, old_log_probs, advantages, mask, generator=None, clipped=None):
        """Random max(1, floor(clip_ratio N)) of the unclipped tokens with lb < Cov < ub (``clipped``: the
        loss's own PPO clip mask, reused)."""
        if clipped is None:
            _, clipped, _ = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        cov, n, active = self.covariance(log_probs, advantages, mask)
        candidates = mask.bool() & ~clipped & (cov > self.cov_lb) & (cov < self.cov_ub)
        flat = candidates.flatten().nonzero().flatten()
        n_clip = max(int(self.clip_ratio * n), 1)
        chosen = random_subset_mask(flat.numel(), n_clip, active, generator, device=mask.device)
        selected = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        selected[flat[chosen]] = True
        return selected.view(mask.shape)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, generator=None, selected=None, **_):
        loss, clipped, _ = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        if selected is not None:  # the backend's mini-batch plan, sliced to these rows
            chosen = selected & mask.bool()
        else:
            with torch.no_grad():
                chosen = self.selection_rule(log_probs.detach(), old_log_probs, advantages, mask, generator, clipped)
        return TokenLoss(loss * (~chosen).to(loss.dtype), clipped=clipped & mask.bool(), selected=chosen)
