"""Token log-probs and entropy through the LM head in vocabulary chunks: the (tokens x vocab) logits never exist.

``head_logprobs(h, W, targets, temperature)`` equals ``log_softmax(h @ W.T / T)[targets]`` and the entropy
``-sum p log p`` of the same distribution, for final hidden states ``h`` (N, d) of the N positions whose outputs
are read. The forward walks the vocabulary in chunks of ``CHUNK`` rows of ``W`` with a running max, a running
sum of exp and a running sum of exp * (z - max) (an online log-sum-exp); the backward walks them again and
recomputes each chunk's logits instead of storing them (d log p_t / dz = onehot_t - p,
dH / dz = -p (z - E_p[z])). Peak extra memory is a few (N x CHUNK) blocks instead of (N x V) logits, their
softmax and their gradient (SmolLM2: V = 49,152). Exact up to float summation order (tests/pocket/test_fast.py
holds it to log_softmax in float64 and runs torch's gradcheck on it).
"""

from __future__ import annotations

import torch

CHUNK = 4096  # vocabulary rows per block; vocabularies up to this size take the plain (one-block) path


class _HeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, targets, temperature: float, chunk: int, with_entropy: bool):
        N, V = h.shape[0], w.shape[0]
        m = s = sz = None
        tgt = h.new_zeros(N)
        rows = torch.arange(N, device=h.device)
        for c0 in range(0, V, chunk):
            z = (h @ w[c0 : c0 + chunk].T) / temperature  # (N, C)
            cm = z.amax(-1)
            new_m = cm if m is None else torch.maximum(m, cm)
            e = torch.exp(z - new_m[:, None])
            e_sum = e.sum(-1)
            ez_sum = (e * (z - new_m[:, None])).sum(-1) if with_entropy else None
            if m is None:
                s, sz = e_sum, ez_sum
            else:  # rescale the sums kept so far from the old max to the new one
                a = torch.exp(m - new_m)
                if with_entropy:
                    sz = a * (sz + (m - new_m) * s) + ez_sum
                s = a * s + e_sum
            m = new_m
            inside = (targets >= c0) & (targets < c0 + z.shape[1])
            tgt = torch.where(inside, z[rows, (targets - c0).clamp(0, z.shape[1] - 1)], tgt)
        lse = m + torch.log(s)
        logp = tgt - lse
        if with_entropy:
            ez = sz / s  # E_p[z - m]
            ent = torch.log(s) - ez  # lse - E_p[z]
            ez = ez + m  # E_p[z], for the backward
        else:
            ez, ent = lse.new_zeros(N), lse.new_zeros(N)
        ctx.save_for_backward(h, w, targets, lse, ez)
        ctx.temperature, ctx.chunk, ctx.with_entropy = temperature, chunk, with_entropy
        return logp, ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        h, w, targets, lse, ez = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gh = torch.zeros_like(h) if need_h else None
        gw = torch.empty_like(w) if need_w else None
        rows = torch.arange(h.shape[0], device=h.device)
        for c0 in range(0, w.shape[0], chunk):
            wc = w[c0 : c0 + chunk]
            z = (h @ wc.T) / temperature
            p = torch.exp(z - lse[:, None])
            gz = p * (-g_lp[:, None])
            if ctx.with_entropy:
                gz = gz - (g_ent[:, None] * p) * (z - ez[:, None])
            inside = (targets >= c0) & (targets < c0 + z.shape[1])
            gz[rows[inside], targets[inside] - c0] += g_lp[inside]
            gz = gz / temperature
            if need_h:
                gh = gh + gz @ wc
            if need_w:
                gw[c0 : c0 + chunk] = gz.T @ h
        return gh, gw, None, None, None, None


def head_logprobs(
    h: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log p(target) at ``temperature`` (N,), entropy at ``temperature`` (N,) or None) for hidden ``h`` (N, d)."""
    chunk = int(chunk or CHUNK)
    if weight.shape[0] <= chunk:  # one block: plain ops (autograd keeps the small logits)
        ls = torch.log_softmax((h @ weight.T) / temperature, dim=-1)
        lp = ls.gather(-1, targets[:, None]).squeeze(-1)
        return lp, (-(ls.exp() * ls).sum(-1) if with_entropy else None)
    lp, ent = _HeadLogprobs.apply(h, weight, targets, float(temperature), chunk, with_entropy)
    return lp, (ent if with_entropy else None)
