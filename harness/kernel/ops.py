"""Shared tensor ops, one implementation each: masked statistics, group statistics, token covariance,
loss aggregation and a vocabulary-streaming token entropy.

Conventions (the official verl fork's): ``mask`` is (B, T) with 1 on response tokens; masked means divide by
``sum(mask) + 1e-8`` so an empty mask gives 0, not NaN.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from harness.kernel.lazy import lazy_import

torch = lazy_import("torch")

EPS_MEAN = 1e-8  # verl masked_mean / token-mean denominator
# aggregation mode -> what its normaliser counts (``micro_batch_weight`` weights a micro-batch by its share of it)
AGG_SPLIT = {
    "token-mean": "tokens",
    "seq-mean-token-sum": "rows",
    "seq-mean-token-mean": "rows",
    "seq-mean-token-sum-norm": "width",
    "seq-mean-token-sum-norm-verl": "rows x width",
}
AGG_MODES = tuple(AGG_SPLIT)
# rows with no valid token in the seq-mean modes: left out of the row count (skip) or counted with loss 0 (count);
# auto = each mode as its reference code does (see ``row_policy``)
EMPTY_ROWS = ("auto", "skip", "count")
_AUTO_ROWS = {"seq-mean-token-sum": "count", "seq-mean-token-mean": "skip", "seq-mean-token-sum-norm-verl": "skip"}
# modes a data-parallel backend can rebuild from global normalisers (OpenRLHF's aggregate_loss: ``token_level_loss``
# divides by the global token count, else per-row means over the global row count; ``global_normaliser_scale``)
GLOBAL_NORMALISED_MODES = ("token-mean", "seq-mean-token-mean")
COV_GROUPS = {"top_0.02pct": 2e-4, "top_0.2pct": 2e-3, "top_2pct": 2e-2, "top_20pct": 0.2, "top_50pct": 0.5}


# -- masked statistics ---------------------------------------------------------------------------
def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """sum(x*m) / (sum(m) + 1e-8), over everything or along ``dim``."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / (count + EPS_MEAN)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Masked variance; unbiased applies Bessel's N/(N-1) (skipped when N <= 1, where it is undefined)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    n = float(mask.sum())
    if unbiased and n > 1:
        var = var * (n / (n - 1))
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) * rsqrt(var + 1e-8) with masked, Bessel-corrected statistics (verl's masked_whiten)."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    white = (x - mean) * torch.rsqrt(var + 1e-8)
    return white if shift_mean else white + mean


# -- groups ----------------------------------------------------------------------------------------
def group_index(group_ids) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids (tensor of ints, or a list of hashables) to 0..G-1; returns (index (B,), G)."""
    if not torch.is_tensor(group_ids):
        keys: dict = {}
        idx = [keys.setdefault(g, len(keys)) for g in group_ids]
        return torch.tensor(idx, dtype=torch.long), len(keys)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse.long(), int(inverse.max()) + 1 if inverse.numel() else 0


def group_stats(scores: torch.Tensor, group: torch.Tensor, n_groups: int):
    """Per-sample (group size, group sum, group mean, unbiased group std); std is NaN for size-1 groups."""
    s = scores.to(torch.float32)
    count = torch.zeros(n_groups, dtype=s.dtype).index_add_(0, group, torch.ones_like(s))
    total = torch.zeros(n_groups, dtype=s.dtype).index_add_(0, group, s)
    mean = total / count
    sq = torch.zeros(n_groups, dtype=s.dtype).index_add_(0, group, (s - mean[group]) ** 2)
    std = torch.sqrt(sq / (count - 1))  # size-1 groups: 0/0 = NaN, callers decide
    return count[group], total[group], mean[group], std[group]


# -- token covariance ------------------------------------------------------------------------------
def token_covariance(
    advantages: torch.Tensor,
    log_probs: torch.Tensor,
    mask: torch.Tensor,
    means: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Per-token (A - mean A)(log pi - mean log pi), means over valid tokens (token-weighted), 0 on padding.

    ``means`` overrides the two centring means (global scope passes mini-batch / all-rank means).
    Inputs are detached: the covariance only selects tokens.
    """
    a, lp = advantages.detach().float(), log_probs.detach().float()
    m = mask.float()
    if means is None:
        n = m.sum().clamp_min(1.0)
        means = ((a * m).sum() / n, (lp * m).sum() / n)
    return (a - means[0]) * (lp - means[1]) * m


def covariance_term(advantages: torch.Tensor, log_probs: torch.Tensor, mask: torch.Tensor) -> float | None:
    """The batch covariance term: mean of ``token_covariance`` over the valid tokens (None when there are none)."""
    valid = mask.bool()
    if not bool(valid.any()):
        return None
    return float(token_covariance(advantages, log_probs, mask)[valid].mean())


def covariance_groups(cov_valid: torch.Tensor) -> dict[str, float]:
    """The paper's Table 1 view: mean covariance of all valid tokens and of the top 0.02/0.2/2/20/50 % groups.

    A group of fraction p holds the max(1, floor(p*N)) largest values. Empty input -> {} (not measured).
    One multi-pivot partition (linear time), no sort.
    """
    n = cov_valid.numel()
    if n == 0:
        return {}
    values = cov_valid.detach().to(torch.float64).cpu().numpy()
    sizes = {key: max(1, int(n * frac)) for key, frac in COV_GROUPS.items()}
    part = np.partition(values, sorted({n - k for k in sizes.values()}))  # each top-k lands in part[n-k:]
    out = {"cov/mean": float(values.mean())}
    for key, k in sizes.items():
        out[f"cov/{key}"] = float(part[n - k :].mean())
    return out


# -- aggregation -----------------------------------------------------------------------------------
def row_policy(mode: str, empty_rows: str = "auto") -> str:
    """``skip`` or ``count``: how ``mode`` treats rows without a valid token. ``auto`` keeps each mode's reference:
    seq-mean-token-sum counts them (the entropy-mechanism fork's mean of row sums), seq-mean-token-mean and
    seq-mean-token-sum-norm-verl leave them out (the fork divides 0/0 there; verl's seq-mean modes exclude fully
    masked rows). ``count`` is TRL's mean over all rows."""
    if empty_rows not in EMPTY_ROWS:
        raise ValueError(f"unknown empty_rows {empty_rows!r}; allowed: {', '.join(EMPTY_ROWS)}")
    return _AUTO_ROWS.get(mode, "skip") if empty_rows == "auto" else empty_rows


def row_count(mask: torch.Tensor, mode: str, empty_rows: str = "auto") -> int:
    """Rows the seq-mean normaliser of ``mode`` counts: all B, or those with at least one valid token."""
    if row_policy(mode, empty_rows) == "count":
        return int(mask.shape[0])
    return int(torch.count_nonzero(mask.sum(-1) > 0)) if mask.numel() else 0


def agg_loss(
    loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", empty_rows: str = "auto"
) -> torch.Tensor:
    """Aggregate a (B, T) per-token loss, official modes.

    token-mean: sum(l*m) / (sum(m) + 1e-8). seq-mean-token-sum: mean over rows of per-row sums.
    seq-mean-token-mean: mean over rows of per-row token means. seq-mean-token-sum-norm (the entropy-mechanism
    fork, Dr. GRPO): sum(l*m) / T, T = mask width, no row mean. seq-mean-token-sum-norm-verl (verl 0.9.1's mode of
    that name): sum(l*m) / (rows * T). ``empty_rows`` (``row_policy``) says which rows the seq-mean modes count.
    With no row counted the result is sum(l*m) (0, differentiable).
    """
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return (loss_mat * m).sum() / (m.sum() + EPS_MEAN)
    if mode == "seq-mean-token-sum-norm":
        return (loss_mat * m).sum() / max(m.shape[-1], 1)
    if mode not in AGG_SPLIT:
        raise ValueError(f"unknown aggregation mode {mode!r}; allowed: {', '.join(AGG_MODES)}")
    policy = row_policy(mode, empty_rows)
    if mode == "seq-mean-token-sum":
        if policy == "count":
            return (loss_mat * m).sum(-1).mean() if m.shape[0] else (loss_mat * m).sum()
        rows = row_count(m, mode, "skip")
        return (loss_mat * m).sum() / rows if rows else (loss_mat * m).sum()
    if mode == "seq-mean-token-mean":
        lengths = m.sum(-1)
        if policy == "count":
            per_row = (loss_mat * m).sum(-1) / lengths.clamp_min(1.0)
            return per_row.mean() if m.shape[0] else (loss_mat * m).sum()
        rows = lengths > 0
        per_row = (loss_mat * m).sum(-1)[rows] / lengths[rows]
        return per_row.mean() if per_row.numel() else (loss_mat * m).sum()
    rows = row_count(m, mode, policy)  # seq-mean-token-sum-norm-verl
    return (loss_mat * m).sum() / (rows * m.shape[-1]) if rows and m.shape[-1] else (loss_mat * m).sum()


def micro_batch_weight(mode: str, micro_mask: torch.Tensor, mini_mask: torch.Tensor, empty_rows: str = "auto") -> float:
    """Scale of a micro-batch's own ``agg_loss`` so that the sum over micro-batches is the mini-batch aggregate.

    Exact for every mode, empty rows included: the micro-batch's share of what the mode's normaliser counts.
    token-mean: valid tokens (verl weights by sequence count instead); seq-mean-token-sum / -mean: counted rows
    (``row_count``); seq-mean-token-sum-norm: its width over the mini-batch's (1 for row slices);
    seq-mean-token-sum-norm-verl: counted rows x width.
    """
    split = AGG_SPLIT.get(mode)
    if split is None:
        raise ValueError(f"unknown aggregation mode {mode!r}; allowed: {', '.join(AGG_MODES)}")
    if split == "tokens":
        return float(micro_mask.sum()) / max(float(mini_mask.sum()), 1.0)
    if split == "width":
        return micro_mask.shape[-1] / max(mini_mask.shape[-1], 1)
    micro = row_count(micro_mask, mode, empty_rows)
    mini = row_count(mini_mask, mode, empty_rows)
    if split == "rows x width":
        micro, mini = micro * micro_mask.shape[-1], mini * mini_mask.shape[-1]
    return micro / mini if mini else 0.0


def global_normaliser_scale(
    mode: str, mask: torch.Tensor, dp_size=1, batch_num_tokens=None, global_batch_size=None, empty_rows: str = "auto"
) -> torch.Tensor:
    """Factor turning the local ``agg_loss`` of one micro-batch on one rank into its share of the aggregate with
    global normalisers (OpenRLHF's ``aggregate_loss``): local_sum / global_count * dp_size, where the count is
    tokens (token-mean) or the rows ``row_count`` counts (seq-mean-token-mean; default: non-empty rows). Without the
    global count: 1."""
    if mode not in GLOBAL_NORMALISED_MODES:
        raise ValueError(
            f"aggregation mode {mode!r} has no global-normaliser form; allowed: {', '.join(GLOBAL_NORMALISED_MODES)}"
        )
    m = mask.float()
    if mode == "token-mean":
        if batch_num_tokens is None:
            return torch.ones((), device=m.device)
        return (m.sum() + EPS_MEAN) / torch.as_tensor(batch_num_tokens, device=m.device, dtype=torch.float32) * dp_size
    if row_policy(mode, empty_rows) == "count":
        rows = torch.tensor(float(m.shape[0]), device=m.device)
    else:
        rows = (m.sum(-1) > 0).float().sum()
    if global_batch_size is None:
        return torch.ones((), device=m.device)
    return rows / torch.as_tensor(global_batch_size, device=m.device, dtype=torch.float32) * dp_size


# -- entropy ---------------------------------------------------------------------------------------
DEFAULT_VOCAB_CHUNK = 8192


@functools.cache
def _streaming_entropy() -> type:
    """The autograd function below, defined on first use (torch is imported lazily: harness/kernel/lazy.py)."""

    class StreamingEntropy(torch.autograd.Function):
        """H(z) = logsumexp(z) - sum softmax(z) * z, accumulated over vocabulary chunks with an online max.

        Forward keeps O(rows x chunk) temporaries; backward recomputes p chunk by chunk:
        dH/dz = -p * (z - E_p[z]).
        """

        @staticmethod
        def forward(ctx, logits: torch.Tensor, chunk: int):
            rows = logits.reshape(-1, logits.shape[-1])
            acc = torch.float32 if rows.dtype in (torch.float16, torch.bfloat16) else rows.dtype
            run_max = torch.full((rows.shape[0], 1), -math.inf, dtype=acc, device=rows.device)
            sum_exp = torch.zeros_like(run_max)
            sum_exp_z = torch.zeros_like(run_max)
            for start in range(0, rows.shape[1], chunk):
                z = rows[:, start : start + chunk].to(acc)
                new_max = torch.maximum(run_max, z.amax(-1, keepdim=True))
                scale = torch.exp(run_max - new_max)
                e = (z - new_max).exp_()
                sum_exp = sum_exp * scale + e.sum(-1, keepdim=True)
                sum_exp_z = sum_exp_z * scale + (e.mul_(z)).sum(-1, keepdim=True)
                run_max = new_max
            lse = run_max + sum_exp.log()
            mean_z = sum_exp_z / sum_exp
            ctx.save_for_backward(logits, lse, mean_z)
            ctx.chunk = chunk
            return (lse - mean_z).reshape(logits.shape[:-1]).to(logits.dtype)

        @staticmethod
        def backward(ctx, grad_out: torch.Tensor):
            logits, lse, mean_z = ctx.saved_tensors
            rows = logits.reshape(-1, logits.shape[-1])
            g = grad_out.reshape(-1, 1).to(lse.dtype)
            grad = torch.empty_like(rows)
            for start in range(0, rows.shape[1], ctx.chunk):
                z = rows[:, start : start + ctx.chunk].to(lse.dtype)
                p = (z - lse).exp_()
                grad[:, start : start + ctx.chunk] = (p.mul_(mean_z - z).mul_(g)).to(grad.dtype)
            return grad.reshape(logits.shape), None

    return StreamingEntropy


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = DEFAULT_VOCAB_CHUNK) -> torch.Tensor:
    """Token entropy of softmax(logits) over the last dim, streaming over the vocabulary in chunks.

    Same value as ``-(log_softmax(z).exp() * log_softmax(z)).sum(-1)`` without a full-size softmax copy
    (peak extra memory ~2 x rows x chunk). Differentiable. Divide logits by the temperature first.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size}")
    return _streaming_entropy().apply(logits, int(chunk_size))
