"""Adaptive entropy control (Skywork-OR1, He et al. 2025, arXiv 2505.22312): an entropy bonus switched on below a
target, with a coefficient that walks toward whatever keeps the entropy at the target.

State carried across steps (``state_dict``): coefficient c and gate e. Step k's loss uses the values left by
step k-1: loss = pg - c * e * token-mean(H), H the differentiable entropy of the current policy. After step k
(``on_step_end``, with that step's metrics row) the controller measures the rollout's entropy H_k and sets
c <- clip(c + delta if H_k < target else c - delta, coef_min, coef_max), e <- [H_k < target].

``variant="skywork"`` (``SkyworkAI/Skywork-OR1``, ``core_algos.py::EntController``, ``ray_trainer.py`` and
``dp_actor.py::get_entropy_metric``): H_k = -mean of the old log-probs over the rollout's tokens
(``rollout/neg_logprob``), strict <, gate starts open. Defaults from every released ``or1_scripts/train/*.sh``:
c0 0, target 0.2, delta 1e-4, c_max 0.005, c_min 0; PPO clip 0.2.
``variant="trl"`` (``trl/trainer/grpo_trainer.py::_compute_loss``, ``use_adaptive_entropy``): H_k = the exact
token-mean entropy (``entropy/rollout_token_mean``), <=, gate starts closed (last entropy = inf).
Differs from official: Skywork normalises the bonus per micro-batch (token mean within each micro-batch);
here the bonus is the token mean over the tokens given, weighted like the policy loss. TRL updates c after every
optimizer step with the current policy's entropy of that step's tokens (and only the top-entropy tokens when
``top_entropy_quantile < 1``); here once per rollout step with the rollout's exact entropy.
Pocket scale: the target is an entropy in nats, so it is rescaled with the model (docs/pocket.md).
"""

from __future__ import annotations

import math

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.method import Method, TokenLoss, register_method

VARIANTS = {"skywork": ("rollout/neg_logprob", "<", True), "trl": ("entropy/rollout_token_mean", "<=", False)}


@register_method("adaptive_entropy")
class AdaptiveEntropy(Method):
    """GRPO + an entropy bonus gated on a target; its coefficient adapts every step (Skywork-OR1; TRL variant)."""

    needs_entropy = True
    coef_init: float = opt(0.0, "initial entropy coefficient c0 (Skywork scripts: 0)", low=0.0)
    target: float = opt(0.2, "target entropy in nats (Skywork: 0.2; rescale for pocket models)", low=0.0)
    delta: float = opt(1e-4, "step of the coefficient per training step (Skywork: 1e-4)", low=0.0)
    coef_min: float = opt(0.0, "lower clip of the coefficient", low=0.0)
    coef_max: float = opt(0.005, "upper clip of the coefficient (Skywork: 0.005)", low=0.0)
    variant: str = opt(
        "skywork",
        "skywork: -mean old log-prob, <, gate open at start; trl: exact entropy, <=, gate closed at start",
        choices=tuple(VARIANTS),
    )

    def __post_init__(self):
        super().__post_init__()
        if self.coef_min > self.coef_max:
            raise ValueError(f"adaptive_entropy: coef_min={self.coef_min} must be <= coef_max={self.coef_max}")
        self.coef = float(self.coef_init)
        self.enabled = 1 if VARIANTS[self.variant][2] else 0
        self.last_measured = None if VARIANTS[self.variant][2] else math.inf
        self.updates = 0

    # -- per-step state ---------------------------------------------------------------------------
    def on_step_end(self, stats: dict) -> None:
        key, op, _ = VARIANTS[self.variant]
        if stats.get(key) is None:
            raise ValueError(
                f"adaptive_entropy ({self.variant}) needs {key!r} in the step's metrics row; got keys {sorted(stats)}"
            )
        h = float(stats[key])
        below = h < self.target if op == "<" else h <= self.target
        self.coef = min(max(self.coef + (self.delta if below else -self.delta), self.coef_min), self.coef_max)
        self.enabled = int(below)
        self.last_measured = h
        self.updates += 1

    def state_dict(self) -> dict:
        return {
            "coef": self.coef,
            "enabled": self.enabled,
            "last_measured": self.last_measured,
            "updates": self.updates,
        }

    def load_state_dict(self, d: dict) -> None:
        self.coef, self.enabled = float(d["coef"]), int(d["enabled"])
        self.last_measured = None if d["last_measured"] is None else float(d["last_measured"])
        self.updates = int(d["updates"])

    # -- loss -------------------------------------------------------------------------------------
    @property
    def realized_coef(self) -> float:
        return self.coef * self.enabled

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
        loss, clipped, _ = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        return TokenLoss(
            loss,
            clipped=clipped & mask.bool(),
            metrics={
                "adaptive_entropy/coef": self.coef,
                "adaptive_entropy/enabled": float(self.enabled),
                "adaptive_entropy/coef_realized": self.realized_coef,
            },
        )

    def extra_loss(self, loss, entropy, mask):
        if entropy is None:
            raise ValueError(
                "adaptive_entropy needs the per-token entropy: call policy_loss(..., entropy=H) with "
                "H (B,T) from harness.entropy_from_logits(logits / temperature), differentiable"
            )
        return loss - self.realized_coef * ops.agg_loss(entropy, mask, "token-mean")
