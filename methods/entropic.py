"""EntroPIC (Yang et al. 2025, "EntroPIC: Towards Stable Long-Term Training of LLMs via Entropy Stabilization with
Proportional-Integral Control", arXiv 2511.15248): a PI controller on the entropy sets alpha, which weighs an extra
loss on the high-probability tokens.

Official code ``yk7333/EntroPIC`` 2470730c (a verl fork; loss mode ``entropic``):
``core_algos.py::compute_policy_loss_entropic``: L = L_PPO + alpha * agg(-r |A|) over the valid tokens with
pi(y_t) > 0.95 (current policy; 0 when there is none), L_PPO verl's PPO clip with the log-ratio clamped to +/-20 and
the dual clip, r the (clamped) ratio with its gradient. alpha > 0 (entropy above target) pushes every
high-probability token up (sharpens), alpha < 0 pushes them down.
``dp_actor.py::EntroPICDataParallelPPOActor.update_policy``, per micro-batch: H = agg(entropy) of the current policy
(the training forward's entropy, detached); alpha = clip(K_i I + K_p (H - H_target), -1, 1) with I the integral
*before* this micro-batch; then I += (H - H_target) * rows / mini-batch rows. ``update="micro_batch"`` is that
(the backend announces each mini-batch's rows through ``begin_mini_batch``; without it a micro-batch counts as a
whole mini-batch). ``update="step"`` (an addition): one alpha per RL step, the same on every rank, from the
rollout's exact token-mean entropy (``entropy/rollout_token_mean``, T = 1) in ``on_step_end``: alpha_{k+1} =
clip(K_i I_k + K_p e_k, -1, 1), I_{k+1} = I_k + e_k; step 1 trains with alpha 0 (the measurement lags one step).
Defaults (``run_entropic.sh``): target 0.1 nats, K_p 1, K_i 0.01, threshold 0.95 (a function default), verl's PPO
clip 0.2/0.2 with dual clip 3 and clamp 20. The target is an entropy in nats: rescale it for pocket models.
Differs from official: the integral and alpha are checkpointed (``state_dict``); the official actor keeps them in
memory only, so a resumed official run restarts the integral at 0. Officially every rank runs its own controller
on its own micro-batches (ranks drift apart); so does ``micro_batch`` here (OpenRLHF resumes every rank from the
checkpointed state of the rank that saved it).
"""

from __future__ import annotations

import math

from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import Method, TokenLoss, register_method

torch = lazy_import("torch")

UPDATES = ("micro_batch", "step")
STEP_KEY = "entropy/rollout_token_mean"


@register_method("entropic")
class EntroPIC(Method):
    """GRPO + PPO clip + alpha x agg(-r |A|) on tokens with pi > 0.95, alpha from a PI controller on the entropy."""

    clip_ratio_c: float = opt(
        3.0, "dual-clip constant for A < 0 (verl default: 3); 0 = none", low=1.0, low_open=True, off=0.0
    )
    log_ratio_clamp: float = opt(
        20.0, "clamp log pi - log pi_old to [-c, c] (the official loss: 20); 0 = none", low=0.0, low_open=True, off=0.0
    )
    target_entropy: float = opt(0.1, "H_target in nats (run_entropic.sh: 0.1; rescale for pocket models)", low=0.0)
    k_p: float = opt(1.0, "proportional gain K_p (run_entropic.sh: 1)", low=0.0)
    k_i: float = opt(0.01, "integral gain K_i (run_entropic.sh: 0.01)", low=0.0)
    high_prob: float = opt(
        0.95, "the adjustment acts on tokens with pi > high_prob (official: 0.95)", low=0.0, high=1.0, low_open=True
    )
    update: str = opt(
        "micro_batch",
        "micro_batch: alpha per micro-batch from its entropy (official); step: per RL step from the rollout's",
        choices=UPDATES,
    )

    def __post_init__(self):
        super().__post_init__()
        self.integral, self.alpha, self.updates = 0.0, 0.0, 0
        self._mini_rows = None  # rows of the current mini-batch (begin_mini_batch)

    @property
    def needs_entropy(self) -> bool:
        return self.update == "micro_batch"

    # -- controller ---------------------------------------------------------------------------------------
    def control(self, measured: float, share: float) -> float:
        """alpha from the integral so far and this error, then the integral += error * share (official order)."""
        error = measured - self.target_entropy
        self.alpha = min(max(self.k_i * self.integral + self.k_p * error, -1.0), 1.0)
        self.integral += error * share
        self.updates += 1
        return self.alpha

    def begin_mini_batch(self, mask) -> None:
        self._mini_rows = int(mask.shape[0])

    def on_step_end(self, stats: dict) -> None:
        if self.update != "step":
            return
        if stats.get(STEP_KEY) is None:
            raise ValueError(
                f"entropic (update: step) needs {STEP_KEY!r} in the step's metrics row; got keys {sorted(stats)}"
            )
        self.control(float(stats[STEP_KEY]), 1.0)

    def state_dict(self) -> dict:
        return {"integral": self.integral, "alpha": self.alpha, "updates": self.updates}

    def load_state_dict(self, d: dict) -> None:
        self.integral, self.alpha, self.updates = float(d["integral"]), float(d["alpha"]), int(d["updates"])

    # -- loss -------------------------------------------------------------------------------------------
    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, **_):
        loss, clipped, log_ratio = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        if self.update == "micro_batch":
            if entropy is None:
                raise ValueError(
                    "entropic (update: micro_batch) needs the per-token entropy: policy_loss(..., entropy=H) with H "
                    "(B,T) from harness.entropy_from_logits(logits / temperature)"
                )
            rows = mask.shape[0]
            share = rows / self._mini_rows if self._mini_rows else 1.0
            self.control(float(self.aggregate(entropy.detach(), mask)), share)
        ratio = torch.exp(self.clamp_log_ratio(log_ratio))
        high = mask.bool() & (log_probs > math.log(self.high_prob))
        adjust = self.alpha * self.aggregate(-ratio * advantages.abs(), high.to(ratio.dtype))
        return TokenLoss(
            loss,
            clipped=clipped & mask.bool(),
            log_ratio=log_ratio,
            extra=adjust,
            metrics={
                "entropic/alpha": self.alpha,
                "entropic/integral": self.integral,
                "entropic/high_prob_frac": float(high.sum()) / max(float(mask.sum()), 1.0),
            },
        )
