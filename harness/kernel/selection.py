"""Token selection for covariance-based methods, in linear time, optionally across data-parallel ranks.

``scope="micro_batch"`` is what the official code does: the population is whatever tensors the loss is
called with (one micro-batch on one GPU). ``scope="global"`` makes the population the whole mini-batch and,
when torch.distributed is initialised, all data-parallel ranks: counts and sums are all-reduced and the
top-k threshold is found from every rank's local top-k, so the selection does not depend on how the
mini-batch was split into micro-batches or over GPUs.
"""

from __future__ import annotations

from harness.kernel.lazy import lazy_import

torch = lazy_import("torch")
dist = lazy_import("torch.distributed")

SCOPES = ("micro_batch", "global")


def distributed_active(scope: str) -> bool:
    return scope == "global" and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(x: torch.Tensor, active: bool) -> torch.Tensor:
    if active:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def covariance_means(advantages, log_probs, mask, active: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Token-weighted means of A and log pi over the valid tokens of the population, and its size N."""
    m = mask.float()
    sums = torch.stack([(advantages.detach().float() * m).sum(), (log_probs.detach().float() * m).sum(), m.sum()])
    sums = all_reduce_sum(sums.to(torch.float64), active)
    n = int(sums[2])
    denom = max(n, 1)
    return (sums[0] / denom).float(), (sums[1] / denom).float(), n


def top_k_mask(values: torch.Tensor, k: int, active: bool) -> torch.Tensor:
    """Bool mask of exactly ``min(k, population)`` largest ``values`` (1-D) over the population.

    Ties at the threshold are taken in position order (rank order across ranks), so the result is
    deterministic and independent of how the population was split. O(N + k log k), no full sort.
    """
    n_local = values.numel()
    chosen = torch.zeros(n_local, dtype=torch.bool, device=values.device)
    if k <= 0:
        return chosen
    local_top = torch.topk(values, min(k, n_local)).values if n_local else values.new_empty(0)
    if active:
        padded = torch.full((k,), -torch.inf, dtype=values.dtype, device=values.device)
        padded[: local_top.numel()] = local_top
        gathered = [torch.empty_like(padded) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, padded)
        pool = torch.cat(gathered)
    else:
        pool = local_top
    pool = pool[torch.isfinite(pool)] if pool.numel() else pool
    if pool.numel() == 0:
        return chosen
    kk = min(k, pool.numel())
    # one rank's topk is already sorted (descending); a gathered pool needs its own
    threshold = torch.topk(pool, kk).values[-1] if active else pool[kk - 1]
    above = values > threshold
    ties = values == threshold
    counts = torch.stack([above.sum(), ties.sum()]).to(torch.long)
    ties_before = 0
    if active:
        per_rank = [torch.empty_like(counts) for _ in range(dist.get_world_size())]
        dist.all_gather(per_rank, counts)
        stacked = torch.stack(per_rank)
        n_above = int(stacked[:, 0].sum())
        ties_before = int(stacked[: dist.get_rank(), 1].sum())
    else:
        n_above = int(counts[0])
    take = max(0, min(int(counts[1]), kk - n_above - ties_before))
    chosen |= above
    if take:
        chosen[ties.nonzero().flatten()[:take]] = True
    return chosen


def random_subset_mask(n_candidates: int, n_take: int, active: bool, generator=None, device=None) -> torch.Tensor:
    """Bool mask choosing ``min(n_take, total candidates)`` candidates uniformly at random.

    Single process: ``torch.randperm(n_candidates, generator)[:n_take]`` over candidates in row-major order,
    the official Clip-Cov draw (bit-identical to it for the same RNG state). Across ranks: iid uniform keys,
    the ``n_take`` smallest win; each rank must then pass its own generator (e.g. seeded by rank).
    """
    chosen = torch.zeros(n_candidates, dtype=torch.bool, device=device)
    if not active:
        if n_candidates and n_take > 0:
            perm = torch.randperm(n_candidates, generator=generator)  # on the generator's device, as the official
            chosen[perm[: min(n_take, n_candidates)].to(chosen.device)] = True
        return chosen
    keys = torch.rand(n_candidates, generator=generator).to(device)  # collectives need the selection device
    return top_k_mask(-keys, n_take, active)


def all_gather_values(values: torch.Tensor, active: bool) -> torch.Tensor:
    """The 1-D ``values`` of every rank concatenated in rank order (``values`` itself when not distributed)."""
    if not active:
        return values
    size = torch.tensor([values.numel()], dtype=torch.long, device=values.device)
    sizes = [torch.empty_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest, dtype=values.dtype, device=values.device)
    padded[: values.numel()] = values
    gathered = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(gathered, padded)
    return torch.cat([g[: int(s)] for g, s in zip(gathered, sizes)])


QUANTILE_MAX = 2**24  # torch.quantile refuses larger inputs


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` (linear interpolation, what TRL's 80/20 mask uses); above its size limit the
    same rule from two order statistics: lerp(v_lo, v_hi, pos - lo) at pos = q (n - 1)."""
    if values.numel() <= QUANTILE_MAX:
        return torch.quantile(values, q)
    pos = q * (values.numel() - 1)
    lo = int(pos)
    v_lo = torch.kthvalue(values, lo + 1).values
    v_hi = torch.kthvalue(values, min(lo + 2, values.numel())).values
    return torch.lerp(v_lo, v_hi, torch.tensor(pos - lo, dtype=values.dtype, device=values.device))
