"""KV-cache sampling and token log-probs for any HF causal LM (pocket or local checkpoint).

Own loop instead of ``model.generate`` so sampling draws from an explicit ``torch.Generator`` (bit-for-bit
reproducible and resumable) and left padding gets correct position ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """Prompts (left-padded) + responses (right-padded); ``mask`` covers response tokens incl. EOS."""

    input_ids: torch.Tensor       # (B, P+T)
    attention_mask: torch.Tensor  # (B, P+T)
    prompt_len: int               # P
    responses: torch.Tensor       # (B, T)
    mask: torch.Tensor            # (B, T) float, 1 on response tokens (EOS included)

    def index(self, rows) -> "Batch":
        return Batch(self.input_ids[rows], self.attention_mask[rows], self.prompt_len, self.responses[rows], self.mask[rows])

    def to(self, device) -> "Batch":
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.prompt_len,
                     self.responses.to(device), self.mask.to(device))


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    att = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p):] = torch.tensor(p, dtype=torch.long)
        att[i, P - len(p):] = 1
    return ids, att


def _positions(att: torch.Tensor) -> torch.Tensor:
    return (att.cumsum(-1) - 1).clamp(min=0)


def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator, greedy: bool) -> torch.Tensor:
    if greedy or temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        keep = sp.cumsum(-1) - sp < top_p
        sp = sp * keep
        choice = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=generator)
        return si.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model, prompts: list[list[int]], *, max_new_tokens: int, eos_id: int, pad_id: int,
             temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False, generator=None,
             chunk_size: int | None = None) -> Batch:
    """Sample one response per prompt (repeat prompts for n samples); stops at EOS or ``max_new_tokens``."""
    if chunk_size and len(prompts) > chunk_size:
        parts = [generate(model, prompts[i:i + chunk_size], max_new_tokens=max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                          temperature=temperature, top_p=top_p, greedy=greedy, generator=generator)
                 for i in range(0, len(prompts), chunk_size)]
        return concat_batches(parts, pad_id)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids, att = left_pad(prompts, pad_id)
    ids, att = ids.to(device), att.to(device)
    B, P = ids.shape
    prompt_att = att
    out = model(input_ids=ids, attention_mask=att, position_ids=_positions(att), use_cache=True)
    cache = out.past_key_values
    logits = out.logits[:, -1, :]
    pos = _positions(att)[:, -1]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    tokens, mask = [], []
    for t in range(max_new_tokens):
        nxt = _sample(logits, temperature, top_p, generator, greedy).to(device)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        mask.append(~done)
        done = done | (nxt == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        att = torch.cat([att, torch.ones((B, 1), dtype=att.dtype, device=device)], dim=1)
        pos = pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=att, position_ids=pos[:, None], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[:, -1, :]
    if was_training:
        model.train()
    responses = torch.stack(tokens, dim=1)
    rmask = torch.stack(mask, dim=1).float()
    full_ids = torch.cat([ids, responses], dim=1)
    full_att = torch.cat([prompt_att, rmask.long()], dim=1)
    return Batch(full_ids, full_att, P, responses, rmask)


def concat_batches(parts: list[Batch], pad_id: int) -> Batch:
    """Concatenate batches with different prompt/response widths (re-padding both sides)."""
    P = max(b.prompt_len for b in parts)
    T = max(b.responses.shape[1] for b in parts)
    ids, att, res, msk = [], [], [], []
    for b in parts:
        dp, dt = P - b.prompt_len, T - b.responses.shape[1]
        n = b.input_ids.shape[0]
        prompt_ids, prompt_att = b.input_ids[:, :b.prompt_len], b.attention_mask[:, :b.prompt_len]
        r = torch.cat([b.responses, b.responses.new_full((n, dt), pad_id)], 1)
        m = torch.cat([b.mask, b.mask.new_zeros((n, dt))], 1)
        pi = torch.cat([prompt_ids.new_full((n, dp), pad_id), prompt_ids], 1)
        pa = torch.cat([prompt_att.new_zeros((n, dp)), prompt_att], 1)
        ids.append(torch.cat([pi, r], 1))
        att.append(torch.cat([pa, m.long()], 1))
        res.append(r)
        msk.append(m)
    return Batch(torch.cat(ids), torch.cat(att), P, torch.cat(res), torch.cat(msk))


def build_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> Batch:
    """A Batch from token lists (supervised warm start; responses already end with EOS)."""
    ids, att = left_pad(prompts, pad_id)
    T = max(len(r) for r in responses)
    res = torch.full((len(responses), T), pad_id, dtype=torch.long)
    msk = torch.zeros((len(responses), T))
    for i, r in enumerate(responses):
        res[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        msk[i, :len(r)] = 1
    return Batch(torch.cat([ids, res], 1), torch.cat([att, msk.long()], 1), ids.shape[1], res, msk)


def response_logits(model, batch: Batch) -> torch.Tensor:
    """(B, T, V) logits predicting each response token (positions P-1 .. P+T-2)."""
    T = batch.responses.shape[1]
    att = batch.attention_mask
    out = model(input_ids=batch.input_ids, attention_mask=att, position_ids=_positions(att), use_cache=False,
                logits_to_keep=T + 1)
    return out.logits[:, :T, :]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Token entropy logsumexp(z) - sum softmax(z) z (verl formula); harness.ops' version when available."""
    try:
        from harness.ops import entropy_from_logits as ops_entropy
    except ImportError:
        ops_entropy = None
    if ops_entropy is not None:
        return ops_entropy(logits)
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


def token_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    """(log-probs (B,T), entropy (B,T) or None) of the batch's response tokens at ``temperature``; 0 on padding."""
    logits = response_logits(model, batch).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses[..., None]).squeeze(-1)
    logp = logp * batch.mask
    ent = entropy_from_logits(logits) * batch.mask if with_entropy else None
    return logp, ent
