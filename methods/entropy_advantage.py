"""Entropy-based advantage shaping (Cheng et al. 2025, "Reasoning with Exploration: An Entropy Perspective",
arXiv 2506.14758, AAAI-26): A'_t = A_t + min(alpha * H_t, |A_t| / kappa), H_t the detached token entropy.

psi = min(alpha H, |A|/kappa) >= 0 and < |A| (kappa > 1), so the shaped advantage never changes sign: on a
correct response it pushes harder on high-entropy tokens, on a wrong one it softens the penalty there; where
A = 0 nothing changes. Estimator ``entropy_advantage`` (extra input ``entropy``: the rollout's token entropy
under the old policy at T = 1, which the backends produce) shapes a base estimator's advantages (``base``: grpo by
default, or rloo / w_reinforce); method ``entropy_advantage`` = this estimator + PPO clip 0.2/0.2.
Defaults alpha 0.4, kappa 2 are NOT verified: no official code exists (papernotes lists "Code: None") and the
values could not be read from the paper's text here; they are the values remembered from the paper, and the pocket
runs use the value chosen by the rescaling sweep (docs/pocket.md). Differs from official: no official code.
"""

from __future__ import annotations

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import ADVANTAGES, Method, register_advantage, register_method

torch = lazy_import("torch")

ENTROPY_ADVANTAGE_OPTIONS = {
    "alpha": opt(0.4, "entropy weight alpha", low=0.0),
    "kappa": opt(2.0, "cap |A|/kappa on the bonus (> 1 keeps the sign of A)", low=1.0, low_open=True),
    "base": opt("grpo", "the estimator whose advantages are shaped (one without extra inputs)"),
    "std_normalize": opt(True, "base grpo: divide by the group std"),
}


def shaped(adv: torch.Tensor, entropy: torch.Tensor, alpha: float, kappa: float) -> torch.Tensor:
    """A + min(alpha * H, |A| / kappa) with H detached."""
    return adv + torch.minimum(alpha * entropy.detach().float(), adv.abs() / kappa)


def _base_estimators() -> list[str]:
    return [n for n in ADVANTAGES.names() if not ADVANTAGES.get(n).extras]


def check_options(options: dict) -> None:
    """The base must be a registered estimator that needs no extra input (so not this one)."""
    if options["base"] not in _base_estimators():
        raise ValueError(f"base={options['base']!r} is not allowed; allowed: {', '.join(_base_estimators())}")


@register_advantage("entropy_advantage", options=ENTROPY_ADVANTAGE_OPTIONS, extras=("entropy",), check=check_options)
def entropy_advantage(scores, group, n_groups, mask, options, *, entropy):
    """A base estimator's advantages plus min(alpha H, |A|/kappa) per token (Cheng et al. 2025)."""
    check_options(options)
    estimator = ADVANTAGES.get(options["base"])
    base_options = dict(estimator.options)
    if "std_normalize" in base_options:
        base_options["std_normalize"] = options["std_normalize"]
    adv = estimator.fn(scores, group, n_groups, mask, base_options)
    return shaped(adv, entropy, float(options["alpha"]), float(options["kappa"])) * mask


@register_method("entropy_advantage")
class EntropyAdvantage(Method):
    """GRPO advantages + min(alpha H, |A|/kappa) per token (alpha 0.4, kappa 2, unverified) + PPO clip 0.2/0.2."""

    advantage: str = opt("entropy_advantage", "advantage estimator (see harness.list_advantages())")
