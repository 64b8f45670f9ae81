"""ERC, Entropy Ratio Clipping (Su et al. 2025, "Entropy Ratio Clipping as a Soft Global Constraint for Stable
Reinforcement Learning", arXiv 2512.05591): drop the gradient of tokens whose entropy moved too far from the old
policy's.

Official code ``Kwai-Klear/ERC`` f1885c5 (a verl fork), ``verl/trainer/ppo/core_algos.py::
compute_policy_loss_grpo_erc`` / ``compute_policy_loss_gppo_erc`` and ``verl/workers/actor/dp_actor.py``:
  rho_t = (H_t + 1e-8) / (H_old,t + 1e-8), H the current policy's token entropy (this micro-batch's training
  forward), H_old the old-log-prob pass's (``entropys``; both at the rollout temperature); keep_t = (low < rho_t <
  high) (strict) on the valid tokens; loss_t = l_t where kept, sg(l_t) elsewhere: a dropped token keeps its value
  and its place in the denominator but gives no gradient. No gradient flows through rho. l_t is verl's PPO clip
  with the log-ratio clamped to +/-20 and the dual clip (``base="ppo"``, loss mode ``grpo_erc`` on DAPO) or GPPO
  (``base="gppo"``, ``gppo_erc``: the clipped branch keeps the gradient (1 -/+ eps) A grad log pi, CE-GPPO with
  beta 1). ``erc/kept_frac`` is the official ``entropy_frac`` (logged there as ``actor/pg_clipfrac_lower``).
Defaults: every released script (``recipe/dapo/*_erc_1_05.sh``): low 0.95, high 1.05 (``actor.yaml``: 0.8/1.2),
clip_ratio_c 10; DAPO clip 0.2/0.28 (the GPPO scripts: 0.2/0.2). ``recipe="official"`` adds the scripts'
``postive_loss_coeff=0.1``: + 0.1 x the NLL of the correct responses (as CE-GPPO's ``recipe: official``).
ERC only acts off-policy: on the first mini-batch H = H_old, rho = 1 and every token is kept.
Differs from official: the release marks a response correct by its reward == 1; the NLL here takes the responses
with A > 0 (the same under the release's DAPO group filtering). The official actor also ``torch.save``s every
micro-batch to a hard-coded path (a debug leftover), not reproduced.
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method
from harness.methods.ce_gppo import OFFICIAL_NLL_COEF, correct_response_nll, gppo_token_loss

torch = lazy_import("torch")

BASES = ("ppo", "gppo")
RATIO_EPS = 1e-8


def entropy_ratio_keep(entropy, old_entropy, mask, low: float, high: float) -> torch.Tensor:
    """(B,T) bool: valid tokens with low < (H + 1e-8)/(H_old + 1e-8) < high (strict; no gradient)."""
    with torch.no_grad():
        rho = (entropy.detach() + RATIO_EPS) / (old_entropy.detach() + RATIO_EPS)
        return (rho > low) & (rho < high) & mask.bool()


@register_method("erc")
class ERC(Method):
    """DAPO clip (0.2/0.28, dual clip 10); tokens with H/H_old outside (0.95, 1.05) give no gradient."""

    needs_entropy = True
    needs_old_entropy = True
    eps_high: float = opt(0.28, "clip: ratio <= 1 + eps_high (DAPO scripts: 0.28; GPPO scripts: 0.2)", low=0.0)
    clip_ratio_c: float = opt(
        10.0, "dual-clip constant for A < 0 (the scripts: 10); 0 = none", low=1.0, low_open=True, off=0.0
    )
    log_ratio_clamp: float = opt(
        20.0, "clamp log pi - log pi_old to [-c, c] (the official loss: 20); 0 = none", low=0.0, low_open=True, off=0.0
    )
    entropy_low: float = opt(0.95, "keep tokens with H/H_old > entropy_low (scripts: 0.95)", low=0.0)
    entropy_high: float = opt(1.05, "keep tokens with H/H_old < entropy_high (scripts: 1.05)", low=0.0)
    base: str = opt("ppo", "ppo: grpo_erc (DAPO); gppo: gppo_erc (clipped tokens keep a gradient)", choices=BASES)
    recipe: str = opt(
        "paper",
        "paper: the loss alone; official: + 0.1 x NLL of the correct responses (the scripts)",
        choices=("paper", "official"),
    )

    def _validate(self):
        super()._validate()
        if self.entropy_low >= self.entropy_high:
            raise ValueError(f"erc: entropy_low={self.entropy_low} must be < entropy_high={self.entropy_high}")

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, old_entropy=None, **_):
        if entropy is None or old_entropy is None:
            raise ValueError(
                "erc needs the current and the old policy's per-token entropy: policy_loss(..., entropy=H, "
                "old_entropy=H_old), both (B,T) at the training temperature (backends pass them: needs_entropy, "
                "needs_old_entropy)"
            )
        log_ratio = log_probs - old_log_probs
        if self.base == "gppo":
            loss, clipped = gppo_token_loss(self.clamp_log_ratio(log_ratio), advantages, self.eps_low, self.eps_high)
            loss = self.apply_dual_clip(loss, advantages)
        else:
            loss, clipped, _ = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        keep = entropy_ratio_keep(entropy, old_entropy, mask, self.entropy_low, self.entropy_high)
        n_valid = float(mask.sum())
        tok = TokenLoss(
            torch.where(keep, loss, loss.detach()),
            clipped=clipped & mask.bool(),
            log_ratio=log_ratio,
            metrics={"erc/kept_frac": float(keep.sum()) / n_valid if n_valid else 0.0},
        )
        if self.recipe == "official":
            nll = correct_response_nll(log_probs, advantages, mask, self.aggregate)
            tok.extra = OFFICIAL_NLL_COEF * nll
            tok.metrics["erc/positive_nll"] = float(nll.detach())
        return tok
