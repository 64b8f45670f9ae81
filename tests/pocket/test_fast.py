"""The fast forward (backends/pocket/fast.py) computes what the transformers forward computes, for the pocket
sizes (Qwen2, MHA), a tiny random Llama (SmolLM2's architecture: grouped-query attention, tied embeddings, its
own RoPE theta and norm eps) and a tiny random Qwen2 with grouped-query attention; and the chunked LM head
(chunked.py) computes log_softmax's values and gradients.

Tolerance: 1e-5 absolute in float32 on logits, log-probs, entropy, every method's loss and the parameter
gradients (relative to the tensor's largest entry for gradients, which reach ~100 on the tiny random models;
the paths differ only in summation order and fused kernels; measured differences are ~1e-7 relative). In
float64 the fast path and the chunked head against plain float64 ops: 1e-10; against the transformers float64
forward 1e-5, because its RMSNorm computes in float32 whatever the model's dtype.
"""

import copy

import pytest
import torch

import harness
from harness.backends.pocket import chunked, fast
from harness.backends.pocket.generate import Batch, fast_path, generate, response_logits, token_logprobs
from harness.backends.pocket.models import build_pocket_model
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer

TOL = 1e-5
TEXTS = ["3 5 7 to 22:", "1+1=", "12 3 4 to 100:", "9 9 to 81:"]  # different lengths -> left padding
KINDS = ["pocket-0.3m", "llama", "qwen2-gqa"]
VOCAB = 300  # the tiny random models' vocabulary (token ids, no tokenizer)


def _perturb(m, sharpen):
    with torch.no_grad():  # random weights are nearly uniform; a sharper head gives non-trivial log-probs
        m.lm_head.weight.mul_(sharpen)
        for i, p in enumerate(m.parameters()):  # non-default norms / biases, so every parameter matters
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    return m


def tiny_llama(vocab=VOCAB, dtype=torch.float32, attention_bias=False, mlp_bias=False, seed=5):
    """SmolLM2's architecture at toy size: GQA (6 query / 2 key-value heads), tied embeddings, theta 500."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=96,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        attention_bias=attention_bias,
        mlp_bias=mlp_bias,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).to(dtype)


def tiny_qwen2_gqa(vocab=VOCAB, dtype=torch.float32, seed=5):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg).to(dtype)


def _model(kind="pocket-0.3m", sharpen=4.0, dtype=torch.float32):
    if kind == "llama":
        return _perturb(tiny_llama(dtype=dtype), sharpen * 1.5).eval()  # tied: the embedding grows too
    if kind == "llama-bias":
        return _perturb(tiny_llama(dtype=dtype, attention_bias=True, mlp_bias=True), sharpen * 1.5).eval()
    if kind == "qwen2-gqa":
        return _perturb(tiny_qwen2_gqa(dtype=dtype), sharpen * 3).eval()
    tok = TokenizerAdapter(build_char_tokenizer())
    return _perturb(build_pocket_model(kind, len(tok), seed=5), sharpen).to(dtype).eval()


def _prompts(kind, n=3):
    if kind.startswith("pocket"):
        tok = TokenizerAdapter(build_char_tokenizer())
        return [tok.encode_prompt(t) for t in TEXTS for _ in range(n)]
    g = torch.Generator().manual_seed(11)
    common = torch.randint(3, VOCAB, (10,), generator=g).tolist()  # like a chat template's system turn
    lens = (9, 4, 13, 6)
    return [[1] + common + torch.randint(3, VOCAB, (k,), generator=g).tolist() for k in lens for _ in range(n)]


def _batch(model, kind, n=3, seed=0, max_new_tokens=6):
    return generate(
        model,
        _prompts(kind, n),
        max_new_tokens=max_new_tokens,
        eos_id=2,
        pad_id=0,
        generator=torch.Generator().manual_seed(seed),
        reference=True,
    )


def _same_gradients(got, ref):
    assert len(got) == len(ref) and any(float(r.abs().max()) > 0.1 for r in ref)
    for a, r in zip(got, ref):
        assert float((a - r).abs().max()) <= TOL * (1 + float(r.abs().max()))


# ---------------------------------------------------------------------------------------------- what runs where
def test_fast_path_covers_qwen2_and_llama_and_declares_their_differences():
    m = _model()
    assert fast.supports(m) and fast_path(m) is not None and fast_path(m, reference=True) is None
    assert fast_path(copy.deepcopy(m).to(torch.bfloat16)) is None  # half precision: HF upcasts inside, we do not
    llama, qwen = tiny_llama(), tiny_qwen2_gqa()
    s, q = fast.spec_of(llama), fast.spec_of(qwen)
    assert (s.family, s.heads, s.kv_heads, s.head_dim, s.rope_theta, s.eps) == ("llama", 6, 2, 8, 500.0, 1e-5)
    assert s.tied and not s.qkv_bias and not s.out_bias and not s.mlp_bias
    assert (q.family, q.kv_heads, q.qkv_bias, q.out_bias, q.tied) == ("qwen2", 2, True, False, False)
    b = fast.spec_of(tiny_llama(attention_bias=True, mlp_bias=True))
    assert b.qkv_bias and b.out_bias and b.mlp_bias
    refused = tiny_llama()
    refused.config.rope_parameters = {"rope_type": "llama3", "rope_theta": 500.0}
    assert "rope_type" in fast.why_unsupported(refused)
    refused = tiny_llama()
    refused.config.pretraining_tp = 2
    assert fast.why_unsupported(refused) == "pretraining_tp > 1"
    qwen.config.use_sliding_window = True
    assert fast.why_unsupported(qwen) == "sliding-window attention"
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50))
    assert "gpt2" in fast.why_unsupported(gpt2) and fast_path(gpt2) is None


def test_positions_past_the_configured_maximum_match_the_transformers_forward():
    for kind in ("pocket-0.3m", "llama"):
        m = _model(kind)
        n = m.config.max_position_embeddings + 12  # HF computes RoPE for any position; the tables grow on demand
        ids = torch.randint(3, 58, (2, n), generator=torch.Generator().manual_seed(0))
        att = torch.ones_like(ids)
        att[1, :5] = 0
        b = Batch(ids, att, n - 4, ids[:, -4:], torch.ones(2, 4))
        with torch.no_grad():
            assert float((response_logits(m, b) - response_logits(m, b, reference=True)).abs().max()) < TOL


# ---------------------------------------------------------------------------------------------- forward
@pytest.mark.parametrize("kind", ["pocket-0.3m", "pocket-1m", "llama", "llama-bias", "qwen2-gqa"])
def test_logits_match_the_transformers_forward(kind):
    m = _model(kind)
    b = _batch(m, kind)
    with torch.no_grad():
        ref = response_logits(m, b, reference=True)
        got = response_logits(m, b)
    assert got.shape == ref.shape and float(ref.std()) > 0.5
    valid = b.mask.bool()
    assert float((got - ref)[valid].abs().max()) < TOL


@pytest.mark.parametrize("kind", ["llama", "qwen2-gqa"])
def test_float64_forward_and_kv_cache_decode_equal_the_full_forward(kind):
    """float64: the cached decode (prefill + one token at a time) = the fast full forward to 1e-10, and both
    = the transformers float64 forward to 1e-5 (its RMSNorm runs in float32)."""
    m = _model(kind, dtype=torch.float64)
    f = fast_path(m)
    prompts = _prompts(kind, 1)
    from harness.backends.pocket.generate import left_pad

    ids, att = left_pad(prompts, 0)
    cont = torch.randint(3, VOCAB, (len(prompts), 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        state, first = f.start(ids, att, max_new_tokens=5)
        stepped = [first]
        for t in range(cont.shape[1] - 1):
            stepped.append(f.step(state, cont[:, t]))
        stepped = torch.stack(stepped, 1)  # logits predicting cont[:, 0..4]
        full_ids = torch.cat([ids, cont], 1)
        full_att = torch.cat([att, torch.ones_like(cont)], 1)
        full = f.logits(full_ids, full_att, keep=cont.shape[1] + 1)[:, :-1]
        hf = response_logits(m, Batch(full_ids, full_att, ids.shape[1], cont, torch.ones(cont.shape)), reference=True)
    assert stepped.dtype == torch.float64 and float(full.std()) > 0.5
    assert float((stepped - full).abs().max()) < 1e-10
    assert float((full - hf).abs().max()) < TOL


def test_a_common_prefix_runs_once_and_changes_nothing():
    """Rows starting with the same tokens (the chat template's system turn) share one prefix pass, in the update
    forward and in the prefill: float64 outputs equal the unshared forward's to 1e-10, sampled tokens are equal."""
    m = _model("llama", dtype=torch.float64)
    f = fast_path(m)
    b = _batch(m, "llama")
    T = b.responses.shape[1]
    split = f._prefix_split(b.input_ids, b.attention_mask, keep=T + 1)
    assert split is not None and split[0].tolist() == _prompts("llama")[0][:11]  # BOS + the 10 common tokens
    valid = b.mask.bool()
    with torch.no_grad():
        shared = f.hidden(b.input_ids, b.attention_mask, keep=T + 1)[:, :T][valid]
        f.share_prefix = False
        plain = f.hidden(b.input_ids, b.attention_mask, keep=T + 1)[:, :T][valid]
    assert float(plain.std()) > 0.1 and float((shared - plain).abs().max()) < 1e-10
    kw = dict(max_new_tokens=6, eos_id=2, pad_id=0, temperature=0.9, with_logprobs=True)
    runs = []
    for share in (False, True):
        f.share_prefix = share
        runs.append(generate(m, _prompts("llama", 4), generator=torch.Generator().manual_seed(1), **kw))
    assert torch.equal(runs[0].responses, runs[1].responses)
    assert float((runs[0].logp - runs[1].logp).abs().max()) < 1e-10


# ---------------------------------------------------------------------------------------------- chunked head
def test_chunked_head_equals_log_softmax_in_float64_and_passes_gradcheck():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(7, 5, dtype=torch.float64, generator=g)
    w = 1.5 * torch.randn(23, 5, dtype=torch.float64, generator=g)
    tgt = torch.tensor([0, 22, 5, 9, 16, 7, 21])  # first and last vocabulary rows, every chunk of 6
    for T in (1.0, 0.6):
        z = (h @ w.T) / T
        ls = torch.log_softmax(z, -1)
        want_lp, want_ent = ls[torch.arange(7), tgt], -(ls.exp() * ls).sum(-1)
        lp, ent = chunked.head_logprobs(h, w, tgt, T, with_entropy=True, chunk=6)  # 4 chunks, the last of 5
        assert torch.allclose(lp, want_lp, atol=1e-12, rtol=0) and torch.allclose(ent, want_ent, atol=1e-12, rtol=0)
        assert float(want_ent.mean()) > 0.1 and float(want_lp.min()) < -3  # not a degenerate distribution
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
    fn = chunked._HeadLogprobs.apply
    assert torch.autograd.gradcheck(lambda a, b: fn(a, b, tgt, 0.7, 6, True), (hh, ww))
    assert torch.autograd.gradcheck(lambda a, b: fn(a, b, tgt, 1.0, 4, False)[0], (hh, ww))


def test_chunked_head_needs_no_vocabulary_sized_block(monkeypatch):
    """Each block is (tokens x CHUNK): a matmul output with as many columns as the vocabulary never appears."""
    h, w = torch.randn(4, 8), torch.randn(50, 8, requires_grad=True)
    widths = []
    real_matmul = torch.Tensor.__matmul__

    def spy(a, b):
        out = real_matmul(a, b)
        widths.append(out.shape[-1])
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    lp, ent = chunked.head_logprobs(h, w, torch.tensor([1, 2, 49, 0]), 1.0, with_entropy=True, chunk=16)
    (lp.sum() + ent.sum()).backward()
    assert widths and max(widths) <= 16 and 50 not in widths


@pytest.mark.parametrize("kind,checkpoint", [(k, False) for k in KINDS] + [("llama", True)])
def test_logprobs_entropy_and_gradients_match(kind, checkpoint, monkeypatch):
    """Also with per-layer activation checkpointing (on for models of >= 50M parameters, e.g. SmolLM2)."""
    monkeypatch.setattr(chunked, "CHUNK", 64)  # the tiny models' 300-token vocabulary goes through 5 chunks
    m = _model(kind)
    fast_path(m).checkpoint = checkpoint
    b = _batch(m, kind)
    m.train()
    out = {}
    for ref in (True, False):
        m.zero_grad(set_to_none=True)
        lp, ent = token_logprobs(m, b, temperature=0.7, with_entropy=True, reference=ref)
        ((lp * b.mask).sum() + 0.3 * (ent * b.mask).sum()).backward()
        out[ref] = (lp.detach(), ent.detach(), [p.grad.clone() for p in m.parameters()])
    (lp_r, ent_r, g_r), (lp_f, ent_f, g_f) = out[True], out[False]
    assert float(lp_r.abs().sum()) > 1 and float(ent_r.abs().sum()) > 1
    assert torch.allclose(lp_f, lp_r, atol=TOL, rtol=0) and torch.allclose(ent_f, ent_r, atol=TOL, rtol=0)
    assert (lp_f[b.mask == 0] == 0).all() and (ent_f[b.mask == 0] == 0).all()
    _same_gradients(g_f, g_r)


@pytest.mark.parametrize("name", harness.list_methods())
def test_every_method_gets_the_same_loss_and_gradient(name):
    m = _model()
    b = _batch(m, "pocket-0.3m")
    method = harness.get_method(name)
    old_model = copy.deepcopy(m)
    with torch.no_grad():  # old policy = a slightly different model, so ratios are not all 1
        for p in old_model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        old, _ = token_logprobs(old_model, b, reference=True)
    adv = torch.linspace(-1.2, 1.5, b.mask.shape[0])[:, None] * b.mask
    m.train()
    res = {}
    for ref in (True, False):  # called as the backends call it (docs/contracts.md: entropy=, global plans)
        m.zero_grad(set_to_none=True)
        lp, ent = token_logprobs(m, b, with_entropy=True, reference=ref)
        ent = ent if method.needs_entropy else None
        selected = None
        if getattr(method, "needs_global_plan", False):
            selected = method.selection_plan(
                lp.detach(),
                old,
                adv,
                b.mask,
                generator=torch.Generator().manual_seed(7),
                **({"entropy": ent.detach()} if ent is not None else {}),
            )
        try:
            o = method.policy_loss(
                lp, old, adv, b.mask, entropy=ent, step=3, selected=selected, generator=torch.Generator().manual_seed(7)
            )
        except ValueError as e:  # the method does not run on the current method base at all: not this test's job
            assert ref, f"the fast path failed where the reference ran: {e}"
            pytest.skip(f"{name} does not run policy_loss here: {e}")
        o.loss.backward()
        res[ref] = (float(o.loss.detach()), [p.grad.clone() for p in m.parameters()])
    assert abs(res[True][0]) > 1e-3
    assert abs(res[False][0] - res[True][0]) < TOL
    _same_gradients(res[False][1], res[True][1])


# ---------------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("kind", KINDS)
def test_fast_generation_samples_the_same_tokens_and_reports_their_logprobs(kind):
    m = _model(kind, sharpen=3.0)
    prompts = _prompts(kind, 8)
    kw = dict(max_new_tokens=7, eos_id=2, pad_id=0, temperature=0.8)
    ref = generate(m, prompts, generator=torch.Generator().manual_seed(3), reference=True, **kw)
    got = generate(m, prompts, generator=torch.Generator().manual_seed(3), with_logprobs=True, **kw)
    assert torch.equal(got.responses, ref.responses) and torch.equal(got.input_ids, ref.input_ids)
    assert ref.logp is None and len({tuple(r.tolist()) for r in got.responses}) > 4  # not vacuous
    # the sampling pass's own log-probs (T=0.8) and entropy (T=1) = a full reference forward of the result
    with torch.no_grad():
        lp_ref, _ = token_logprobs(m, got, temperature=0.8, reference=True)
        _, ent_ref = token_logprobs(m, got, with_entropy=True, reference=True)
    assert torch.allclose(got.logp, lp_ref, atol=TOL, rtol=0)
    assert torch.allclose(got.entropy, ent_ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", ["pocket-0.3m", "llama"])
def test_finished_rows_leave_the_cache_without_changing_anything(kind, monkeypatch):
    """Compacting the KV cache as rows finish (every step here) gives the tokens, log-probs and entropies of
    never compacting: the same generator draws, the same rows' logits."""
    from harness.backends.pocket import generate as G

    m = _model(kind, sharpen=3.0)
    prompts = _prompts(kind, 6)
    stop = 2 if kind.startswith("pocket") else list(range(2, 40))  # rows end at different steps
    kw = dict(max_new_tokens=9, eos_id=stop, pad_id=0, temperature=0.9, with_logprobs=True)
    runs = []
    for at in (0.0, 1.0):  # never / at every step
        monkeypatch.setattr(G, "COMPACT_AT", at)
        runs.append(generate(m, prompts, generator=torch.Generator().manual_seed(5), **kw))
    lengths = runs[0].mask.sum(1)
    assert int(lengths.min()) < int(lengths.max()) and int(lengths.min()) < 9  # rows did finish early
    assert torch.equal(runs[0].responses, runs[1].responses) and torch.equal(runs[0].mask, runs[1].mask)
    assert torch.equal(runs[0].logp, runs[1].logp) and torch.equal(runs[0].entropy, runs[1].entropy)


def test_a_kv_cache_budget_splits_generation_into_calls_with_the_same_greedy_result(monkeypatch):
    from harness.backends.pocket import generate as G

    m = _model("llama")
    prompts = _prompts("llama", 3)
    kw = dict(max_new_tokens=6, eos_id=2, pad_id=0, greedy=True)
    whole = generate(m, prompts, **kw)
    calls = []
    real = fast.FastDecoder.start

    def counted(self, ids, *a, **k):
        calls.append(ids.shape[0])
        return real(self, ids, *a, **k)

    monkeypatch.setattr(fast.FastDecoder, "start", counted)
    monkeypatch.setattr(G, "KV_CACHE_BYTES", 5 * fast_path(m).cache_bytes(max(map(len, prompts)) + 6))
    split = generate(m, prompts, **kw)
    assert calls == [5, 5, 2] and torch.equal(split.responses, whole.responses)


def test_trimming_keeps_outputs_of_valid_tokens():
    m = _model()
    b = _batch(m, "pocket-0.3m")
    pad = 0
    # pad one more all-padding column on the left and two empty response columns on the right
    n = b.input_ids.shape[0]
    ids = torch.cat([torch.full((n, 1), pad), b.input_ids, torch.full((n, 2), pad)], 1)
    att = torch.cat([torch.zeros(n, 1, dtype=torch.long), b.attention_mask, torch.zeros(n, 2, dtype=torch.long)], 1)
    res = torch.cat([b.responses, torch.full((n, 2), pad)], 1)
    wide = Batch(ids, att, b.prompt_len + 1, res, torch.cat([b.mask, torch.zeros(n, 2)], 1))
    with torch.no_grad():
        lp_w, ent_w = token_logprobs(m, wide, with_entropy=True)
        lp, ent = token_logprobs(m, b, with_entropy=True, reference=True)
    assert lp_w.shape == (n, b.mask.shape[1] + 2) and (lp_w[:, -2:] == 0).all()
    assert torch.allclose(lp_w[:, :-2], lp, atol=TOL, rtol=0) and torch.allclose(ent_w[:, :-2], ent, atol=TOL, rtol=0)
