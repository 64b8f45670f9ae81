"""The README's "add your own method in one file" example (tests/foundation/test_custom_method.py runs it)."""

from harness import MethodBase, TokenLoss, hparam, register_method


@register_method("capped_pg")
class CappedPG(MethodBase):
    """GRPO advantages; a plain policy gradient whose per-token weight exp(log r) is capped at `cap` (no clip)."""

    cap: float = hparam(2.0, "largest importance weight", low=1.0)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        import torch  # here, not at the top: `harness methods` imports every method module and stays torch-free

        ratio = torch.exp(log_probs - old_log_probs)
        capped = ratio.detach() > self.cap
        weight = torch.where(capped, self.cap * ratio / ratio.detach(), ratio)
        return TokenLoss(-weight * advantages, clipped=capped & mask.bool())
