"""Entropy bonus: the GRPO loss minus ``coef`` x the aggregated token entropy (verl ``entropy_coeff``).

loss = pg_loss - coef * agg(entropy, mask, agg); ``entropy`` must be the differentiable per-token entropy of
the current policy (harness.kernel.ops.entropy_from_logits on temperature-scaled logits). The official entropy-mechanism
scripts run with coef = 0; 1e-3 here is verl's historical default and the middle of the paper's alpha sweep.
"""

from harness.kernel.fields import opt
from harness.kernel.method import Method, register_method


@register_method("entropy_bonus")
class EntropyBonus(Method):
    """GRPO + entropy regularisation."""

    needs_entropy = True
    coef: float = opt(1e-3, "entropy coefficient alpha (loss -= alpha * entropy)")

    def extra_loss(self, loss, entropy, mask):
        if entropy is None:
            raise ValueError(
                "entropy_bonus needs the per-token entropy: call policy_loss(..., entropy=H) with H (B,T) "
                "from harness.entropy_from_logits(logits / temperature), differentiable"
            )
        return loss - self.coef * self.aggregate(entropy, mask)
