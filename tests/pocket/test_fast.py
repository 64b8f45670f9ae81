"""The fast forward (backends/pocket/fast.py) computes what the transformers Qwen2 forward computes.

Tolerance: 1e-5 absolute on logits, log-probs, entropy, every method's loss and the parameter gradients
(float32; the paths differ only in summation order and fused kernels, measured differences are ~1e-7).
"""

import copy

import pytest
import torch

import harness
from harness.backends.pocket import fast
from harness.backends.pocket.generate import Batch, fast_path, generate, response_logits, token_logprobs
from harness.backends.pocket.models import build_pocket_model
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer

TOL = 1e-5
TEXTS = ["3 5 7 to 22:", "1+1=", "12 3 4 to 100:", "9 9 to 81:"]  # different lengths -> left padding


def _model(size="pocket-0.3m", sharpen=4.0):
    tok = TokenizerAdapter(build_char_tokenizer())
    m = build_pocket_model(size, len(tok), seed=5)
    with torch.no_grad():  # random weights are nearly uniform; a sharper head gives non-trivial log-probs
        m.lm_head.weight.mul_(sharpen)
        for i, p in enumerate(m.parameters()):  # non-default norms / biases, so every parameter matters
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    return m.eval(), tok


def _batch(model, tok, n=3, seed=0):
    prompts = [tok.encode_prompt(t) for t in TEXTS for _ in range(n)]
    return generate(
        model,
        prompts,
        max_new_tokens=6,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        generator=torch.Generator().manual_seed(seed),
        reference=True,
    )


def test_fast_path_is_used_for_pocket_sizes_only():
    m, _ = _model()
    assert fast.supports(m) and fast_path(m) is not None and fast_path(m, reference=True) is None
    assert fast_path(copy.deepcopy(m).to(torch.bfloat16)) is None  # half precision: HF upcasts inside, we do not
    m.config.num_key_value_heads = 2  # grouped-query attention: not what the fast path computes
    assert not fast.supports(m)


def test_positions_past_the_configured_maximum_match_the_transformers_forward():
    m, tok = _model()
    n = m.config.max_position_embeddings + 12  # HF computes RoPE for any position; the tables grow on demand
    ids = torch.randint(3, len(tok), (2, n), generator=torch.Generator().manual_seed(0))
    att = torch.ones_like(ids)
    att[1, :5] = 0
    b = Batch(ids, att, n - 4, ids[:, -4:], torch.ones(2, 4))
    with torch.no_grad():
        assert float((response_logits(m, b) - response_logits(m, b, reference=True)).abs().max()) < TOL


@pytest.mark.parametrize("size", ["pocket-0.3m", "pocket-1m"])
def test_logits_match_the_transformers_forward(size):
    m, tok = _model(size)
    b = _batch(m, tok)
    with torch.no_grad():
        ref = response_logits(m, b, reference=True)
        got = response_logits(m, b)
    assert got.shape == ref.shape and float(ref.std()) > 0.5
    valid = b.mask.bool()
    assert float((got - ref)[valid].abs().max()) < TOL


def test_logprobs_entropy_and_gradients_match():
    m, tok = _model()
    b = _batch(m, tok)
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
    for a, r in zip(g_f, g_r):
        assert torch.allclose(a, r, atol=TOL, rtol=1e-4)


@pytest.mark.parametrize("name", harness.list_methods())
def test_every_method_gets_the_same_loss_and_gradient(name):
    m, tok = _model()
    b = _batch(m, tok)
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
    for a, r in zip(res[False][1], res[True][1]):
        assert torch.allclose(a, r, atol=TOL, rtol=1e-4)


def test_fast_generation_samples_the_same_tokens_and_reports_their_logprobs():
    m, tok = _model(sharpen=3.0)
    prompts = [tok.encode_prompt(t) for t in TEXTS for _ in range(8)]
    kw = dict(max_new_tokens=7, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=0.8)
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


def test_trimming_keeps_outputs_of_valid_tokens():
    m, tok = _model()
    b = _batch(m, tok)
    # pad one more all-padding column on the left and two empty response columns on the right
    n = b.input_ids.shape[0]
    ids = torch.cat([torch.full((n, 1), tok.pad_id), b.input_ids, torch.full((n, 2), tok.pad_id)], 1)
    att = torch.cat([torch.zeros(n, 1, dtype=torch.long), b.attention_mask, torch.zeros(n, 2, dtype=torch.long)], 1)
    res = torch.cat([b.responses, torch.full((n, 2), tok.pad_id)], 1)
    wide = Batch(ids, att, b.prompt_len + 1, res, torch.cat([b.mask, torch.zeros(n, 2)], 1))
    with torch.no_grad():
        lp_w, ent_w = token_logprobs(m, wide, with_entropy=True)
        lp, ent = token_logprobs(m, b, with_entropy=True, reference=True)
    assert lp_w.shape == (n, b.mask.shape[1] + 2) and (lp_w[:, -2:] == 0).all()
    assert torch.allclose(lp_w[:, :-2], lp, atol=TOL, rtol=0) and torch.allclose(ent_w[:, :-2], ent, atol=TOL, rtol=0)
