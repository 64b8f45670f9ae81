"""KV-cache sampling matches a no-cache reference, including left padding, and is reproducible."""

import torch

from harness.backends.pocket.generate import generate, token_logprobs
from harness.backends.pocket.models import SIZES, build_pocket_model, n_params
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer


def _model(tok):
    m = build_pocket_model("pocket-0.3m", len(tok), seed=3)
    with torch.no_grad():  # a sharper random model so greedy outputs vary between prompts
        m.lm_head.weight.mul_(40.0)
    return m.eval()


def _naive_greedy(model, prompt, n, eos):
    cur = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(input_ids=torch.tensor([cur])).logits[0, -1].argmax())
            cur.append(nxt)
            if nxt == eos:
                break
    return cur[len(prompt) :]


def test_sizes_have_the_advertised_parameter_counts():
    tok = TokenizerAdapter(build_char_tokenizer())
    counts = {s: n_params(build_pocket_model(s, len(tok), 0)) for s in SIZES}
    assert 0.1e6 < counts["pocket-0.1m"] < 0.16e6
    assert 0.25e6 < counts["pocket-0.3m"] < 0.4e6
    assert 0.9e6 < counts["pocket-1m"] < 1.2e6
    assert 3.5e6 < counts["pocket-4m"] < 4.5e6


def test_cached_greedy_matches_no_cache_with_left_padding():
    tok = TokenizerAdapter(build_char_tokenizer())
    model = _model(tok)
    texts = ["3 5 7 to 22:", "1+1=", "12 3 4 to 100:"]  # different lengths -> left padding
    prompts = [tok.encode_prompt(t) for t in texts]
    b = generate(model, prompts, max_new_tokens=6, eos_id=tok.eos_id, pad_id=tok.pad_id, greedy=True)
    outs = set()
    for i, p in enumerate(prompts):
        ref = _naive_greedy(model, p, 6, tok.eos_id)
        got = b.responses[i][b.mask[i].bool()].tolist()
        assert got == ref, (texts[i], got, ref)
        outs.add(tuple(ref))
    assert len(outs) > 1  # the check is not vacuous


def test_sampling_is_reproducible_and_logprobs_are_consistent():
    tok = TokenizerAdapter(build_char_tokenizer())
    model = _model(tok)
    prompts = [tok.encode_prompt(t) for t in ["3 5 7 to 22:", "1+1="] * 4]
    kw = dict(max_new_tokens=5, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.0)
    b1 = generate(model, prompts, generator=torch.Generator().manual_seed(1), **kw)
    b2 = generate(model, prompts, generator=torch.Generator().manual_seed(1), **kw)
    assert torch.equal(b1.responses, b2.responses) and torch.equal(b1.mask, b2.mask)
    with torch.no_grad():
        lp, ent = token_logprobs(model, b1, with_entropy=True)
    assert lp.shape == b1.mask.shape and (lp[b1.mask == 0] == 0).all() and (lp[b1.mask == 1] <= 0).all()
    # a response's log-prob from the batched (padded) forward equals the unpadded single-sequence one
    i = 1
    r = b1.responses[i][b1.mask[i].bool()].tolist()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[i] + r])).logits[0, len(prompts[i]) - 1 : -1]
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
    assert torch.allclose(lp[i][: len(r)], ref, atol=1e-5)
    assert (ent[b1.mask == 1] >= 0).all() and float(ent.max()) <= float(torch.log(torch.tensor(float(len(tok))))) + 1e-4
