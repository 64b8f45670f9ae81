"""KL-Cov (Cui et al. 2025, §5): an |log-ratio| penalty on the top-covariance tokens.

Official semantics (verl ``compute_policy_loss_kl_cov``): no PPO clip at all; l_i = -A_i r_i, plus
beta * |log r_i| on the K = max(1, floor(k_ratio * N)) tokens of largest Cov (N = valid tokens; none when N = 0).
``k_ratio`` is a fraction (official scripts: k_percent 0.2 = 2e-3 for 7B, 0.02 = 2e-4 for 32B). Ties at the K-th
value are broken by position (the official ``torch.topk`` breaks them arbitrarily).

The penalty is to the behaviour (old) policy. On the first, on-policy mini-batch of a rollout its *value* is ~0, but
its *gradient* is beta * sign(log r) * grad log pi at full strength on every selected token: when the old log-probs
come from another pass than the training forward (the official code, OpenRLHF, and pocket's default
``train.old_log_probs: rollout``), log r there is rounding noise, so the push has a random sign. Only exact old
log-probs (pocket ``train.old_log_probs: recompute``: log r = 0 exactly) make that gradient 0 (torch's |x|' at 0 is
0). ``selected/below_floor`` counts the selected tokens whose |log r| is below the noise floor; the pocket backend
logs ``penalty/grad_norm``, the gradient norm of the penalty alone on the step's first mini-batch.

Additions (default off = official): ``beta_schedule="linear"`` anneals beta to 0 over ``anneal_steps`` (the
comparative analysis recommends annealing); ``scope="global"`` selects over the whole mini-batch (and all ranks);
``dead_zone=d`` penalises beta * max(|log r| - d, 0), so a log-ratio within the noise band pushes nothing.
No ``eps_low``/``eps_high``: the official ``compute_policy_loss_kl_cov`` is not passed a clip range (the 7B/32B
kl_cov scripts set clip_ratio 0.2/0.2, unused) and verl's merged KL-Cov has none either, so they are refused;
configs written before record them at 0.2, which is accepted and ignored so their run ids hold.
"""

from __future__ import annotations

from harness.kernel.covariance import CovarianceMethod
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import TokenLoss, register_method
from harness.kernel.selection import top_k_mask

torch = lazy_import("torch")


@register_method("kl_cov")
class KLCov(CovarianceMethod):
    """GRPO advantages; unclipped policy gradient; beta * |log r| on the top-k covariance tokens."""

    retired_hparams = {"eps_low": 0.2, "eps_high": 0.2}
    retired_reason = "KL-Cov has no PPO clip: the official compute_policy_loss_kl_cov takes no clip range"

    k_ratio: float = opt(
        2e-3, "fraction of valid tokens penalised (top covariance), at least 1", low=0.0, high=1.0, low_open=True
    )
    beta: float = opt(1.0, "coefficient of |log pi - log pi_old| on the selected tokens", low=0.0)
    beta_schedule: str = opt(
        "constant", "constant, or linear anneal to 0 over anneal_steps", choices=("constant", "linear")
    )
    anneal_steps: int = opt(1000, "steps of the linear beta anneal", low=1)
    dead_zone: float = opt(
        0.0,
        "addition: penalise beta * max(|log r| - dead_zone, 0), no push inside the noise band; 0 = official",
        low=0.0,
        late=True,
    )

    def beta_at(self, step: int) -> float:
        if self.beta_schedule == "linear":
            return self.beta * max(0.0, 1.0 - step / self.anneal_steps)
        return self.beta

    def selection_rule(self, log_probs, old_log_probs, advantages, mask, generator=None):
        """The K largest-covariance valid tokens (ties by position)."""
        cov, n, active = self.covariance(log_probs, advantages, mask)
        k = max(1, int(n * self.k_ratio)) if n > 0 else 0
        ranked = cov.masked_fill(~mask.bool(), -torch.inf).flatten()  # padding can never win; no compaction copy
        return top_k_mask(ranked, k, active).view(mask.shape)

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, step=0, generator=None, selected=None, **_):
        log_ratio = log_probs - old_log_probs
        if selected is not None:  # the backend's mini-batch plan, sliced to these rows
            chosen = selected & mask.bool()
        else:
            with torch.no_grad():
                chosen = self.selection_rule(log_probs.detach(), old_log_probs, advantages, mask, generator)
        beta = self.beta_at(step)
        distance = log_ratio.abs() if self.dead_zone == 0 else torch.relu(log_ratio.abs() - self.dead_zone)
        penalty = beta * distance * chosen.to(log_ratio.dtype)
        return TokenLoss(
            -advantages * torch.exp(log_ratio) + penalty,
            clipped=None,
            selected=chosen,
            log_ratio=log_ratio,  # no PPO clip: clipfrac is 0
            metrics={"kl_cov/beta": beta},
            penalty=penalty,
        )
