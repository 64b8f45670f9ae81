"""CE-GPPO (Su et al. 2025, arXiv 2509.20712): PPO clip that keeps a bounded gradient on clipped tokens.

Per token (``Kwai-Klear/CE-GPPO``, ``verl/trainer/ppo/core_algos.py::compute_gppo_loss_general_beta``):
  r < 1 - eps_low and A < 0:   -beta1 (1 - eps_low) (r / sg(r)) A     value as PPO's clipped branch x beta1,
  r > 1 + eps_high and A > 0:  -beta2 (1 + eps_high) (r / sg(r)) A    gradient beta (1 -/+ eps) A grad log pi
  otherwise:                   -r A                                   (PPO's unclipped branch)
then dual-clip for A < 0: min(-A c, loss) with c = clip_ratio_c. beta1 = beta2 = 1 is Klear-Reasoner's GPPO;
PPO drops the clipped tokens' gradient entirely. Defaults: the 7B script
``recipe/dapo/7B_perf_run_gppo_v1_beta1_075_beta2_1_ours_math.sh``: beta1 0.75 (1.5B script: 0.5; yaml
default 0.25), beta2 1, eps 0.2/0.2, clip_ratio_c 10. clipfrac counts the two clipped regions (official).

``recipe="official"`` adds what the released scripts train with beyond the paper's loss: every script sets
``positive_loss_coeff=0.1`` (``dp_actor.update_policy``): + 0.1 x the NLL -log pi of the correct responses,
aggregated with the loss's ``agg`` over those responses only (token-mean: their token mean), per micro-batch, 0
when there is none. ``recipe="paper"`` (default) is the paper's loss alone.
Differs from official: the release marks a response correct by its reward (== the correct score); the loss here
sees advantages only and takes the responses with A > 0. The two agree under the release's DAPO group filtering
(every kept group has a correct and a wrong response, so with GRPO or RLOO A > 0 exactly on the correct ones);
without filtering an all-correct group (A = 0) is left out of the NLL here.
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, dual_clip, register_method

torch = lazy_import("torch")

__all__ = ["CEGPPO", "correct_response_nll", "dual_clip", "gppo_token_loss"]
RECIPES = ("paper", "official")
OFFICIAL_NLL_COEF = 0.1  # positive_loss_coeff of every released script


def gppo_token_loss(log_ratio, advantages, eps_low: float, eps_high: float, beta1: float = 1.0, beta2: float = 1.0):
    """(loss, clipped) per token before the dual clip: PPO's clipped branch keeps the value (1 -/+ eps) A and a
    beta-scaled gradient; beta1 = beta2 = 1 is GPPO (also ERC's ``gppo_erc``). ``log_ratio`` as the ratio sees it."""
    ratio = torch.exp(log_ratio)
    unit = ratio / ratio.detach()  # value 1, gradient grad log pi
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    loss = torch.where(
        low,
        -beta1 * (1.0 - eps_low) * unit * advantages,
        torch.where(high, -beta2 * (1.0 + eps_high) * unit * advantages, -ratio * advantages),
    )
    return loss, low | high


@register_method("ce_gppo")
class CEGPPO(Method):
    """GRPO advantages; PPO clip whose clipped tokens keep a beta-scaled gradient; dual-clip c = 10."""

    beta1: float = opt(0.75, "gradient scale on clipped tokens with r < 1 - eps_low, A < 0 (7B script)", low=0.0)
    beta2: float = opt(1.0, "gradient scale on clipped tokens with r > 1 + eps_high, A > 0", low=0.0)
    clip_ratio_c: float = opt(
        10.0, "dual-clip constant c for A < 0 (official scripts: 10); 0 = none", low=1.0, low_open=True, off=0.0
    )
    recipe: str = opt(
        "paper",
        "paper: the paper's loss; official: + 0.1 x NLL of the correct responses (the released scripts)",
        choices=RECIPES,
        late=True,
    )

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        log_ratio = log_probs - old_log_probs
        loss, clipped = gppo_token_loss(
            self.clamp_log_ratio(log_ratio), advantages, self.eps_low, self.eps_high, self.beta1, self.beta2
        )
        tok = TokenLoss(self.apply_dual_clip(loss, advantages), clipped=clipped & mask.bool(), log_ratio=log_ratio)
        if self.recipe == "official":
            nll = self.correct_nll(log_probs, advantages, mask)
            tok.extra = OFFICIAL_NLL_COEF * nll
            tok.metrics["ce_gppo/positive_nll"] = float(nll.detach())
        return tok

    def correct_nll(self, log_probs, advantages, mask) -> torch.Tensor:
        """-log pi aggregated (``agg``) over the responses with A > 0 on a valid token; 0 when there is none."""
        return correct_response_nll(log_probs, advantages, mask, self.aggregate)


def correct_response_nll(log_probs, advantages, mask, aggregate) -> torch.Tensor:
    """The release's NLL term (Klear ``positive_loss_coeff``): -log pi aggregated with ``aggregate(loss, mask)`` over
    the responses with A > 0 on a valid token (the correct ones under group filtering); 0 when there is none."""
    valid = mask.bool()
    rows = ((advantages > 0) & valid).any(-1)
    if not bool(rows.any()):
        return (log_probs * 0.0).sum()
    return aggregate(-log_probs[rows], mask[rows])
