"""High-entropy tokens only (Wang et al. 2025, "Beyond the 80/20 Rule", arXiv 2506.01939): the policy gradient
acts on the top-rho fraction of tokens by entropy ("forking tokens"); the other 80% get no gradient.

Official code (``Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR``, ``core_algos.py::get_global_entropy_top_mask``, called
in ``dp_actor.update_policy`` on each micro-batch's current-policy entropy): k = max(1, int(n * rho + 0.9999))
tokens of the n valid ones, by ``torch.topk``; loss = DAPO's PPO clip (0.2 / 0.28, dual-clip c = 10) aggregated
token-mean over the *selected* tokens (``agg_loss(..., response_mask * entropy_top_mask)``). Defaults from
``run_only_top20_high_entropy_tokens_dapo_qwen3_14b.sh``: rho 0.2, eps 0.2/0.28, clip_ratio_c 10.

``normalize="selected"`` (official) divides by the selected tokens; ``"all"`` by all valid tokens (the paper's
formula and TRL's ``top_entropy_quantile``): a 1/rho (5x) smaller loss and gradient. ``scope="micro_batch"``
(official) selects within each micro-batch; ``"global"`` over the whole mini-batch (and all data-parallel ranks)
through the backend's ``selection_plan``, so the tokens do not depend on the micro-batch size.
``selection="quantile"`` is TRL's mask (``top_entropy_quantile``, ``get_high_entropy_mask``): every valid token
with H >= the (1 - rho) quantile of the population's valid entropies (``torch.quantile``, linear interpolation), so
ties at the threshold are all kept (5 equal entropies at rho 0.2: all 5, where top-k keeps 1) and the count is not
fixed. TRL gathers the entropies of the micro-batch over every process, which is ``scope="micro_batch"`` on one
process. TRL has no dual clip: ``clip_ratio_c: 0`` with ``normalize: all`` and ``selection: quantile`` is TRL's loss.
Differs from official: ties at the k-th entropy are broken by position (``torch.topk``: arbitrary); with
``scope="global"`` and ``normalize="selected"`` the denominator is the mini-batch's selected count.
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method
from harness.kernel.selection import SCOPES, all_gather_values, all_reduce_sum, distributed_active, quantile, top_k_mask

torch = lazy_import("torch")

SELECTIONS = ("topk", "quantile")


def n_top(n_valid: int, rho: float) -> int:
    """The official count: max(1, int(n * rho + 0.9999)) (a ceil that rounds fractions below 1e-4 down); 0 if n = 0."""
    return max(1, int(n_valid * rho + 0.9999)) if n_valid > 0 else 0


@register_method("high_entropy_tokens")
class HighEntropyTokens(Method):
    """DAPO clip (0.2/0.28) on the top 20% highest-entropy tokens only (Beyond the 80/20 rule)."""

    needs_entropy = True
    eps_high: float = opt(0.28, "PPO clip: ratio <= 1 + eps_high (official: 0.28)", low=0.0)
    rho: float = opt(
        0.2, "fraction of valid tokens kept, by entropy (official top_ratio 0.2)", low=0.0, high=1.0, low_open=True
    )
    normalize: str = opt(
        "selected", "loss denominator: selected tokens (official code) or all (paper, TRL)", choices=("selected", "all")
    )
    scope: str = opt(
        "micro_batch", "selection population: micro_batch (official) or global (mini-batch, ranks)", choices=SCOPES
    )
    clip_ratio_c: float = opt(
        10.0, "dual-clip constant for A < 0 (official script: 10); 0 = none (TRL)", low=1.0, low_open=True, off=0.0
    )
    selection: str = opt(
        "topk",
        "topk: the official k = ceil(rho n) tokens; quantile: H >= the (1 - rho) quantile, ties kept (TRL)",
        choices=SELECTIONS,
        late=True,
    )

    def __post_init__(self):
        super().__post_init__()
        if self.agg != "token-mean":
            raise ValueError(
                f"high_entropy_tokens: agg={self.agg!r}; the official loss is token-mean "
                f"(normalize= chooses its denominator)"
            )
        self._plan_fraction = None  # selected / valid over the last global plan's mini-batch

    @property
    def needs_global_plan(self) -> bool:
        return self.scope == "global"

    def select(self, entropy, mask) -> tuple[torch.Tensor, int, int]:
        """(B,T) bool top-rho tokens by entropy over the population, and (selected, valid) counts."""
        active = distributed_active(self.scope)
        valid = mask.bool()
        n = int(all_reduce_sum(valid.sum().to(torch.float64), active))
        ent = entropy.detach().float()
        if self.selection == "quantile":
            pool = all_gather_values(ent[valid], active)
            if pool.numel() == 0:
                return torch.zeros_like(valid), 0, n
            chosen = valid & (ent >= quantile(pool, 1.0 - self.rho))
            return chosen, int(all_reduce_sum(chosen.sum().to(torch.float64), active)), n
        k = n_top(n, self.rho)
        ranked = ent.masked_fill(~valid, -torch.inf).flatten()
        return top_k_mask(ranked, k, active).view(mask.shape) & valid, k, n

    def selection_plan(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, generator=None):
        if entropy is None:
            raise ValueError("high_entropy_tokens: selection_plan needs entropy= (detached (B,T) token entropy)")
        with torch.no_grad():
            chosen, k, n = self.select(entropy, mask)
        self._plan_fraction = k / n if n else 0.0
        return chosen

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, selected=None, **_):
        loss, clipped, _ = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        if selected is not None:
            chosen = selected.bool() & mask.bool()
            fraction = self._plan_fraction if self._plan_fraction is not None else self.rho
        else:
            if entropy is None:
                raise ValueError("high_entropy_tokens needs the per-token entropy: policy_loss(..., entropy=H)")
            chosen, k, n = self.select(entropy, mask)
            fraction = k / n if n else 0.0
        # the base aggregates token-mean over all valid tokens; rescale so the denominator is the selected count
        scale = 1.0 / fraction if (self.normalize == "selected" and fraction > 0) else 1.0
        return TokenLoss(loss * chosen.to(loss.dtype) * scale, clipped=clipped & mask.bool(), selected=chosen)
