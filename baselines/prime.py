"""PRIME (Cui et al. 2025, "Process Reinforcement through Implicit Rewards"), verl's ``recipe/prime`` semantics.

Implicit process reward: q_t = log pi_prm(y_t) - log pi_ref(y_t); r_t = beta * q_t on every response token
except the last one (verl's port drops it; ``drop_last_process_reward=False`` keeps it, as the original PRIME
repo does). ``norm="batch_norm"``: r <- r / (max over the batch of |reverse-cumsum(r)| + 1e-6), so beta only
matters for the PRM loss. Each source (process rewards on all response tokens; the outcome score on the last
token) gets a leave-one-out baseline per prompt group: r~ = r * n/(n-1) - (sum_j m_j)/(n-1), m_j = response
j's mean reward over that source's positions. reward = process_coef * r~_process + outcome_coef * r~_outcome;
returns = reverse cumsum (gamma 1); advantages = masked whitening of the returns over the batch.

The implicit PRM is trained online with ``prm_loss`` (cross-entropy on sigmoid(beta * sum_t q_t) vs the outcome):
the estimator declares it as its ``AuxiliaryModel`` (``implicit_prm``), which every loss combined with
``advantage: prime`` gets (verl recipe defaults: lr 1e-6, grad clip 10, update before the rewards); the ``prime``
method exposes those as its ``prm_*`` hyperparameters.
Deviation: groups of one response raise (the leave-one-out baseline divides by n - 1).
"""

from __future__ import annotations

import dataclasses

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import AuxiliaryModel, Method, register_advantage, register_method

torch = lazy_import("torch")
F = lazy_import("torch.nn.functional")

PRIME_OPTIONS = {
    "beta": opt(0.05, "implicit-reward scale beta (PRM loss and rewards)", low=0.0, low_open=True),
    "process_coef": opt(5.0, "weight of the process rewards", low=0.0),
    "outcome_coef": opt(5.0, "weight of the outcome reward", low=0.0),
    "drop_last_process_reward": opt(True, "no process reward on the last token (verl's port)"),
    "norm": opt("batch_norm", "process-reward normalisation", choices=("batch_norm", "none")),
}


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last valid token of each row (-1 for an empty row)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.full_like(positions, -1)).amax(-1)


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1).cumsum(-1).flip(-1)


def leave_one_out(reward: torch.Tensor, positions: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per-source RLOO on token rewards: r * n/(n-1) - sum_j m_j / (n-1) on ``positions``, 0 elsewhere."""
    pos = positions.float()
    counts = pos.sum(-1)
    row_mean = (reward * pos).sum(-1) / counts.clamp_min(1)  # m_j (0 for a row with no position)
    group_size = torch.zeros(n_groups).index_add_(0, group, torch.ones_like(row_mean))[group]
    if bool((group_size < 2).any()):
        raise ValueError(
            "prime needs at least 2 responses per prompt (leave-one-out baseline); "
            f"found a group of {int(group_size.min())}"
        )
    group_sum = torch.zeros(n_groups).index_add_(0, group, row_mean)[group]
    n = group_size[:, None]
    return (reward * n / (n - 1) - group_sum[:, None] / (n - 1)) * pos


def prm_loss(
    prm_log_probs: torch.Tensor, ref_log_probs: torch.Tensor, mask: torch.Tensor, acc: torch.Tensor, beta: float = 0.05
) -> torch.Tensor:
    """PRIME's PRM cross-entropy: BCE(sigmoid(beta * sum_t (log pi_prm - log pi_ref)), acc), mean over responses.

    Differentiable in ``prm_log_probs``; ``acc`` is the 0/1 outcome per response (B,).
    """
    valid = mask.bool()  # padding may hold anything (NaN): select, never multiply by the mask
    q = prm_log_probs.masked_fill(~valid, 0.0) - ref_log_probs.detach().masked_fill(~valid, 0.0)
    logits = beta * q.sum(-1)
    return F.binary_cross_entropy_with_logits(logits, acc.to(logits.dtype))


def implicit_prm(options: dict) -> AuxiliaryModel:
    """PRIME's implicit PRM: trainable copy of the policy + frozen reference, trained with ``prm_loss``."""
    return AuxiliaryModel("prm", provides=("prm_log_probs", "ref_log_probs"), loss=prm_loss, beta=options["beta"])


@register_advantage(
    "prime", options=PRIME_OPTIONS, extras=("prm_log_probs", "ref_log_probs"), auxiliary=implicit_prm, min_group_size=2
)
def prime_advantage(scores, group, n_groups, mask, options, *, prm_log_probs, ref_log_probs):
    """Implicit process rewards + outcome, leave-one-out per source, 5:5 mix, returns, whitening."""
    m = mask
    last = last_token_index(m)
    rows = torch.arange(m.shape[0])
    has_token = last >= 0
    valid = m.bool()  # padding may hold anything (NaN): zero it before any arithmetic
    q = prm_log_probs.detach().float().masked_fill(~valid, 0.0) - ref_log_probs.detach().float().masked_fill(
        ~valid, 0.0
    )
    process = options["beta"] * q
    if options["drop_last_process_reward"]:
        process[rows[has_token], last[has_token]] = 0.0
    if options["norm"] == "batch_norm":
        process = process / (reverse_cumsum(process).abs().max() + 1e-6)
    outcome_pos = torch.zeros_like(m)
    outcome_pos[rows[has_token], last[has_token]] = 1.0
    outcome = outcome_pos * scores.float()[:, None]
    reward = options["process_coef"] * leave_one_out(process, m, group, n_groups) + options[
        "outcome_coef"
    ] * leave_one_out(outcome, outcome_pos, group, n_groups)
    returns = reverse_cumsum(reward * m)
    return ops.masked_whiten(returns, m) * m


@register_method("prime")
class PRIME(Method):
    """PRIME advantages (needs prm_log_probs and ref_log_probs) + PPO clip (0.2, 0.2).

    ``prm_*`` fields configure the backend's online PRM training (verl recipe defaults)."""

    advantage: str = opt("prime", "advantage estimator (see harness.list_advantages())")
    prm_lr: float = opt(1e-6, "learning rate of the implicit PRM", low=0.0)
    prm_grad_clip: float = opt(10.0, "grad-norm clip of the PRM update", low=0.0)
    prm_update: str = opt(
        "before", "update the PRM before computing rewards (double forward) or after", choices=("before", "after")
    )

    @property
    def prm_beta(self) -> float:
        return self.estimator_options()["beta"]

    def auxiliary_model(self):
        spec = super().auxiliary_model()
        if spec is None:  # prime's loss with another estimator: no PRM
            return None
        return dataclasses.replace(spec, lr=self.prm_lr, grad_clip=self.prm_grad_clip, update=self.prm_update)
