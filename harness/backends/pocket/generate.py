"""KV-cache sampling and token log-probs for any HF causal LM (pocket or local checkpoint).

Own loop instead of ``model.generate`` so sampling draws from an explicit ``torch.Generator`` (bit-for-bit
reproducible and resumable) and left padding gets correct position ids. Models that ``fast.supports``
(the pocket sizes, Qwen2 and Llama checkpoints such as SmolLM2) run through ``fast.FastDecoder`` (same
parameters, far fewer ops; log-probs through the LM head in vocabulary chunks, ``chunked.py``); everything else,
and ``reference=True``, runs the transformers forward, which the tests hold the fast path to.
Sampling draws from ``sampling_logits``: temperature, then top-k, then top-p, with the arithmetic of the
transformers logits warpers (tests/pocket/test_sampling.py holds it to them). A response ends at a stop id or,
with ``stop_strings``, at the token that completes one of them in its decoded text.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from . import fast as _fast
from .chunked import head_logprobs

_FAST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_REFERENCE = {"on": False}


def use_reference_path(on: bool = True) -> None:
    """Process-wide: run the transformers forward everywhere (benchmarks' before/after; tests use reference=)."""
    _REFERENCE["on"] = bool(on)


def fast_path(model, reference: bool = False):
    """The model's ``FastDecoder`` (built once per model), or None where the HF forward must run."""
    if reference or _REFERENCE["on"]:
        return None
    if model.get_input_embeddings().weight.dtype not in (torch.float32, torch.float64):
        return None  # HF runs RMSNorm/RoPE in float32 for half-precision models; the fast path does not
    f = _FAST.get(model)
    if f is None and _fast.supports(model):
        f = _FAST[model] = _fast.FastDecoder(model)
    return f


@dataclass
class Batch:
    """Prompts (left-padded) + responses (right-padded); ``mask`` covers response tokens incl. EOS."""

    input_ids: torch.Tensor  # (B, P+T)
    attention_mask: torch.Tensor  # (B, P+T)
    prompt_len: int  # P
    responses: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float, 1 on response tokens (EOS included)
    # from the sampling pass (fast path only): log-probs at the sampling temperature and T=1 entropy, 0 on padding
    logp: torch.Tensor | None = None
    entropy: torch.Tensor | None = None

    def index(self, rows) -> Batch:
        pick = lambda t: None if t is None else t[rows]
        return Batch(
            self.input_ids[rows],
            self.attention_mask[rows],
            self.prompt_len,
            self.responses[rows],
            self.mask[rows],
            pick(self.logp),
            pick(self.entropy),
        )

    def to(self, device) -> Batch:
        move = lambda t: None if t is None else t.to(device)
        return Batch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.prompt_len,
            self.responses.to(device),
            self.mask.to(device),
            move(self.logp),
            move(self.entropy),
        )


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    att = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
        att[i, P - len(p) :] = 1
    return ids, att


def _positions(att: torch.Tensor) -> torch.Tensor:
    return (att.cumsum(-1) - 1).clamp(min=0)


def sampling_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """The logits the sampler draws from (softmax of them): float32 logits / T, then top-k, then top-p, with
    the arithmetic of transformers' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper (removed
    tokens get -inf; at least one token is kept)."""
    z = logits.float() / temperature
    if top_k and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k).values[..., -1:], float("-inf"))
    if top_p < 1.0:
        sz, si = torch.sort(z, descending=False)
        drop = sz.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        drop[..., -1:] = False
        z = z.masked_fill(drop.scatter(-1, si, drop), float("-inf"))
    return z


KV_CACHE_BYTES = 1 << 30  # fast path: larger batches are generated in several calls (200 SmolLM2 rows: 2.9 GB)
COMPACT_AT = 0.75  # fast path: once this share of the running rows is left, finished rows leave the cache
MULTINOMIAL_MAX_VOCAB = 4096  # above: inverse-CDF draws (torch.multinomial costs 36 ms per step at 16 x 49k)


def draw(probs: torch.Tensor, generator) -> torch.Tensor:
    """One index per row of ``probs`` (B, V), drawn with probability ``probs``. Small vocabularies use
    ``torch.multinomial`` (the draws of every earlier pocket run); large ones one uniform per row against the
    cumulative sum (the same distribution; zero-probability entries are never drawn)."""
    if probs.shape[-1] <= MULTINOMIAL_MAX_VOCAB:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _sample(logits, temperature: float, top_p: float, generator, greedy: bool, top_k: int = 0) -> torch.Tensor:
    if greedy or temperature == 0:
        return logits.argmax(-1)
    return draw(torch.softmax(sampling_logits(logits, temperature, top_p, top_k), dim=-1), generator)


class StopStrings:
    """Multi-token stop strings: a row is done at the token that completes one of ``strings`` in its decoded
    response (checked every step on the last few tokens, so the first occurrence ends it; the string stays in
    the response, as with transformers' ``stop_strings``)."""

    def __init__(self, strings, decode):
        self.strings = tuple(s for s in strings if s)
        self.decode = decode
        self.window = max((len(s) for s in self.strings), default=0) + 8  # tokens: each decodes to >= 1 char

    def __bool__(self) -> bool:
        return bool(self.strings)

    def hits(self, tokens: list, active: torch.Tensor) -> torch.Tensor:
        """(B,) bool: rows of ``active`` whose response (``tokens``, a list of (B,) steps) now holds a string."""
        out = torch.zeros_like(active)
        rows = active.nonzero().squeeze(-1).tolist()
        if not rows:
            return out
        recent = torch.stack(tokens[-self.window :], dim=1)[rows].tolist()
        for r, ids in zip(rows, recent):
            text = self.decode(ids)
            if any(s in text for s in self.strings):
                out[r] = True
        return out


def _distinct_rows(prompts: list[list[int]]) -> tuple[list[int], list[int]]:
    """(first row of each distinct prompt, distinct index of every row): n samples share one prefill."""
    seen: dict = {}
    first, inverse = [], []
    for i, p in enumerate(prompts):
        k = seen.setdefault(tuple(p), len(seen))
        if k == len(first):
            first.append(i)
        inverse.append(k)
    return first, inverse


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """Half-precision logits to float32 (float32/float64 stay as they are)."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def _record(logits: torch.Tensor, nxt: torch.Tensor, temperature: float):
    """(log-prob of ``nxt`` at ``temperature``, T=1 entropy) from one decoding step's raw logits."""
    ls1 = torch.log_softmax(_upcast(logits), dim=-1)
    ent = -(ls1.exp() * ls1).sum(-1)
    ls = ls1 if temperature == 1.0 else torch.log_softmax(_upcast(logits) / temperature, dim=-1)
    return ls.gather(-1, nxt[:, None]).squeeze(-1), ent


@torch.no_grad()
def generate(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int | list[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    greedy: bool = False,
    generator=None,
    chunk_size: int | None = None,
    with_logprobs: bool = False,
    reference: bool = False,
    stop_strings: StopStrings | None = None,
) -> Batch:
    """Sample one response per prompt (repeat prompts for n samples); stops at EOS or ``max_new_tokens``.

    ``eos_id``: one id or several stop ids; ``stop_strings``: multi-token stop strings (``StopStrings``).
    ``with_logprobs`` (fast path only): the Batch also carries each sampled token's log-prob at
    ``temperature`` (without top-k/top-p) and the T=1 entropy, from the sampling pass itself (eval mode).
    """
    f = fast_path(model, reference)
    if f is not None:  # the preallocated KV cache of one call stays within KV_CACHE_BYTES (rows per call)
        width = max(len(p) for p in prompts) + max_new_tokens
        rows = max(1, KV_CACHE_BYTES // f.cache_bytes(width))
        chunk_size = min(chunk_size or len(prompts), rows)
    if chunk_size and len(prompts) > chunk_size:
        parts = [
            generate(
                model,
                prompts[i : i + chunk_size],
                max_new_tokens=max_new_tokens,
                eos_id=eos_id,
                pad_id=pad_id,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                greedy=greedy,
                generator=generator,
                with_logprobs=with_logprobs,
                reference=reference,
                stop_strings=stop_strings,
            )
            for i in range(0, len(prompts), chunk_size)
        ]
        return concat_batches(parts, pad_id)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids, att = left_pad(prompts, pad_id)
    ids, att = ids.to(device), att.to(device)
    stop = torch.as_tensor(eos_id, device=device).reshape(-1)  # one EOS id or several stop ids
    record = with_logprobs and f is not None
    if f is not None:
        logits, advance = _fast_decoding(f, ids, att, prompts, max_new_tokens)
    else:
        logits, advance = _hf_decoding(model, ids, att)
    draws = dict(temperature=temperature, top_p=top_p, top_k=top_k, greedy=greedy, generator=generator)
    tokens, mask, lps, ents = _decode(logits, advance, stop, max_new_tokens, pad_id, draws, record, stop_strings)
    if was_training:
        model.train()
    responses = torch.stack(tokens, dim=1)
    rmask = torch.stack(mask, dim=1).float()
    full_ids = torch.cat([ids, responses], dim=1)
    full_att = torch.cat([att, rmask.long()], dim=1)
    logp = torch.stack(lps, dim=1) * rmask if record else None
    entropy = torch.stack(ents, dim=1) * rmask if record else None
    return Batch(full_ids, full_att, ids.shape[1], responses, rmask, logp, entropy)


def _fast_decoding(f, ids, att, prompts, max_new_tokens):
    """The fast path's first logits and ``advance(nxt, done) -> next logits``: one prefill per distinct prompt
    (n samples share its keys/values), finished rows dropped from the KV cache."""
    B, device = ids.shape[0], ids.device
    first, inverse = _distinct_rows(prompts)
    if len(first) < B:  # prefill each distinct prompt once, then share its keys/values
        rows = torch.tensor(first, device=device)
        state, logits = f.start(ids[rows], att[rows], max_new_tokens, expand=torch.tensor(inverse, device=device))
    else:
        state, logits = f.start(ids, att, max_new_tokens)

    live = {"rows": torch.arange(B, device=device), "logits": logits.clone()}

    def advance(nxt, done):
        """The next logits of every row; only the rows still generating run (finished rows keep their last
        logits: they are sampled, so the generator advances as without this, then replaced by padding)."""
        rows = live["rows"]
        going = ~done[rows]
        if int(going.sum()) <= COMPACT_AT * len(rows):  # drop finished rows from the KV cache
            keep = going.nonzero().squeeze(-1)
            f.compact(state, keep)
            rows = live["rows"] = rows[keep]
        live["logits"][rows] = f.step(state, nxt[rows])
        return live["logits"]

    return logits, advance


def _hf_decoding(model, ids, att):
    """A Hugging Face model's first logits and ``advance(nxt, done) -> next logits`` through its KV cache."""
    B, device = ids.shape[0], ids.device
    out = model(input_ids=ids, attention_mask=att, position_ids=_positions(att), use_cache=True)
    hf = {"cache": out.past_key_values, "att": att, "pos": _positions(att)[:, -1]}

    def advance(nxt, done):
        hf["att"] = torch.cat([hf["att"], torch.ones((B, 1), dtype=att.dtype, device=device)], dim=1)
        hf["pos"] = hf["pos"] + 1
        o = model(
            input_ids=nxt[:, None],
            attention_mask=hf["att"],
            position_ids=hf["pos"][:, None],
            past_key_values=hf["cache"],
            use_cache=True,
        )
        hf["cache"] = o.past_key_values
        return o.logits[:, -1, :]

    return out.logits[:, -1, :], advance


def _decode(logits, advance, stop, max_new_tokens: int, pad_id: int, draws: dict, record: bool, stop_strings):
    """Sample token by token until every row stopped (a stop id or string) or ``max_new_tokens``: the tokens,
    the masks of the rows still generating, and (``record``) each token's log-prob and entropy, one (B,) a step."""
    done = torch.zeros(logits.shape[0], dtype=torch.bool, device=stop.device)
    tokens, mask, lps, ents = [], [], [], []
    for t in range(max_new_tokens):
        nxt = _sample(logits, draws["temperature"], draws["top_p"], draws["generator"], draws["greedy"], draws["top_k"])
        nxt = nxt.to(stop.device)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        if record:
            lp, ent = _record(logits, nxt, draws["temperature"])
            lps.append(lp)
            ents.append(ent)
        tokens.append(nxt)
        mask.append(~done)
        done = done | torch.isin(nxt, stop)
        if stop_strings:
            done = done | stop_strings.hits(tokens, ~done)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        logits = advance(nxt, done)
    return tokens, mask, lps, ents


def concat_batches(parts: list[Batch], pad_id: int) -> Batch:
    """Concatenate batches with different prompt/response widths (re-padding both sides)."""
    P = max(b.prompt_len for b in parts)
    T = max(b.responses.shape[1] for b in parts)
    ids, att, res, msk, lps, ents = [], [], [], [], [], []
    carry = all(b.logp is not None for b in parts)
    for b in parts:
        dp, dt = P - b.prompt_len, T - b.responses.shape[1]
        n = b.input_ids.shape[0]
        prompt_ids, prompt_att = b.input_ids[:, : b.prompt_len], b.attention_mask[:, : b.prompt_len]
        r = torch.cat([b.responses, b.responses.new_full((n, dt), pad_id)], 1)
        m = torch.cat([b.mask, b.mask.new_zeros((n, dt))], 1)
        pi = torch.cat([prompt_ids.new_full((n, dp), pad_id), prompt_ids], 1)
        pa = torch.cat([prompt_att.new_zeros((n, dp)), prompt_att], 1)
        ids.append(torch.cat([pi, r], 1))
        att.append(torch.cat([pa, m.long()], 1))
        res.append(r)
        msk.append(m)
        if carry:
            lps.append(torch.cat([b.logp, b.logp.new_zeros((n, dt))], 1))
            ents.append(torch.cat([b.entropy, b.entropy.new_zeros((n, dt))], 1))
    return Batch(
        torch.cat(ids),
        torch.cat(att),
        P,
        torch.cat(res),
        torch.cat(msk),
        torch.cat(lps) if carry else None,
        torch.cat(ents) if carry else None,
    )


def build_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> Batch:
    """A Batch from token lists (supervised warm start; responses already end with EOS)."""
    ids, att = left_pad(prompts, pad_id)
    T = max(len(r) for r in responses)
    res = torch.full((len(responses), T), pad_id, dtype=torch.long)
    msk = torch.zeros((len(responses), T))
    for i, r in enumerate(responses):
        res[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        msk[i, : len(r)] = 1
    return Batch(torch.cat([ids, res], 1), torch.cat([att, msk.long()], 1), ids.shape[1], res, msk)


def _trim(batch: Batch) -> tuple[Batch, int]:
    """Drop leading columns that are padding in every row and trailing response columns with no token.

    Valid positions keep their inputs and positions (ids from the attention mask), so their outputs are the
    same function; returns (trimmed batch, original response width).
    """
    T = batch.responses.shape[1]
    used = batch.mask.any(0).nonzero()
    t_used = int(used[-1]) + 1 if len(used) else 1
    real = batch.attention_mask[:, : batch.prompt_len].any(0).nonzero()
    a = int(real[0]) if len(real) else 0
    if a == 0 and t_used == T:
        return batch, T
    end = batch.prompt_len + t_used
    return Batch(
        batch.input_ids[:, a:end],
        batch.attention_mask[:, a:end],
        batch.prompt_len - a,
        batch.responses[:, :t_used],
        batch.mask[:, :t_used],
    ), T


def response_logits(model, batch: Batch, reference: bool = False) -> torch.Tensor:
    """(B, T, V) logits predicting each response token (positions P-1 .. P+T-2)."""
    T = batch.responses.shape[1]
    att = batch.attention_mask
    f = fast_path(model, reference)
    if f is not None:
        return f.logits(batch.input_ids, att, keep=T + 1)[:, :T]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=att,
        position_ids=_positions(att),
        use_cache=False,
        logits_to_keep=T + 1,
    )
    return out.logits[:, :T, :]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Token entropy logsumexp(z) - sum softmax(z) z (verl formula); harness.kernel.ops' version when available."""
    try:
        from harness.kernel.ops import entropy_from_logits as ops_entropy
    except ImportError:
        ops_entropy = None
    if ops_entropy is not None:
        return ops_entropy(logits)
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


def token_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False, reference: bool = False):
    """(log-probs (B,T), entropy (B,T) or None) of the batch's response tokens at ``temperature``; 0 on padding.

    The fast path trims all-padding columns, runs the decoder up to the final norm and puts only the valid
    response positions through the LM head, in vocabulary chunks (``chunked.head_logprobs``: no (B, T, V)
    logits); ``reference=True`` is the transformers forward + log_softmax + ``harness.kernel.ops`` entropy.
    """
    f = fast_path(model, reference)
    if f is None:
        logits = _upcast(response_logits(model, batch, reference=True))
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses[..., None]).squeeze(-1)
        logp = logp * batch.mask
        ent = entropy_from_logits(logits) * batch.mask if with_entropy else None
        return logp, ent
    small, T = _trim(batch)
    Ts = small.responses.shape[1]
    h = f.hidden(small.input_ids, small.attention_mask, keep=Ts + 1)[:, :Ts]
    valid = small.mask.bool()
    lp_v, ent_v = head_logprobs(h[valid], model.lm_head.weight, small.responses[valid], temperature, with_entropy)
    logp = _scatter(valid, lp_v, T)
    ent = _scatter(valid, ent_v, T) if with_entropy else None
    return logp, ent


def _scatter(valid: torch.Tensor, values: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) zeros holding ``values`` at the True positions of ``valid`` (B, <= width); differentiable."""
    out = values.new_zeros((valid.shape[0], width))
    full = torch.nn.functional.pad(valid, (0, width - valid.shape[1]))
    return out.masked_scatter(full, values)


def sample_problems(model, tok, problems, n, temperature, generator, *, max_new_tokens, **options) -> Batch:
    """``n`` responses to each of ``problems`` (``{prompt, ...}``, ``n`` rows a problem, in order) with the
    tokenizer's stop ids; ``options``: ``generate``'s (top_p, greedy, with_logprobs, stop_strings)."""
    prompts = [tok.encode_prompt(p["prompt"]) for p in problems for _ in range(n)]
    return generate(
        model,
        prompts,
        max_new_tokens=max_new_tokens,
        eos_id=getattr(tok, "stop_ids", tok.eos_id),
        pad_id=tok.pad_id,
        temperature=temperature,
        generator=generator,
        chunk_size=512,
        **options,
    )


def response_texts(batch: Batch, tok) -> list[str]:
    """Each response of ``batch`` decoded (its masked tokens)."""
    rows, masks = batch.responses.tolist(), batch.mask.bool().tolist()  # plain lists: no per-row tensor ops
    return [tok.decode([t for t, keep in zip(r, m) if keep]) for r, m in zip(rows, masks)]


def score_responses(batch: Batch, tok, task, problems, n, texts=None) -> torch.Tensor:
    """The task's reward of each response of ``batch`` (``n`` rows a problem, as ``sample_problems`` lays out)."""
    texts = response_texts(batch, tok) if texts is None else texts
    return torch.tensor([task.verify(t, problems[i // n]) for i, t in enumerate(texts)], dtype=torch.float32)


def eval_metrics(batch: Batch, tok, task, problems, k) -> tuple[dict, torch.Tensor]:
    """The held-out metrics of ``k`` responses a problem (avg@k, pass@k, maj@k with standard errors: the evals'
    ``summarize``; maj@k votes by ``task.answer_key``) and the grades, one row a problem."""
    from harness.evals.metrics import summarize

    texts = response_texts(batch, tok)
    sc = score_responses(batch, tok, task, problems, k, texts).view(len(problems), k)
    keys = [task.answer_key(t) for t in texts]
    rows = [
        {"correct": [bool(x) for x in row], "answers": keys[i * k : (i + 1) * k]} for i, row in enumerate(sc.tolist())
    ]
    return summarize(rows, k=k), sc
