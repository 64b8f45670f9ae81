"""Our sampler draws from the distribution transformers' ``generate`` draws from.

On a tiny random Llama (SmolLM2's architecture), the same prefixes: the per-token distribution of our loop
(fast forward + KV cache + ``sampling_logits``) equals softmax of the scores HF ``generate`` samples from
(``output_scores``: its logits after its temperature / top-k / top-p warpers), at every step of HF's own
sampled continuation; the draws themselves follow it (a chi-square test at a fixed seed, with a check that
the same test rejects a wrong temperature); multi-token stop strings end a response at the token completing them.
"""

import math

import pytest
import torch

from harness.backends.pocket import generate as G
from harness.backends.pocket.generate import StopStrings, fast_path, generate, left_pad, sampling_logits
from harness.backends.pocket.models import build_pocket_model
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer

from .test_fast import _perturb, tiny_llama

VOCAB = 300
TOL = 1e-5


def _llama():
    return _perturb(tiny_llama(vocab=VOCAB, seed=9), 3.0).eval()


def _prefixes(n=6):
    g = torch.Generator().manual_seed(4)
    common = torch.randint(3, VOCAB, (9,), generator=g).tolist()
    return [[1] + common + torch.randint(3, VOCAB, (3 + 2 * i,), generator=g).tolist() for i in range(n)]


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.7, 20, 1.0), (1.3, 0, 0.8), (0.6, 50, 0.9)],
)
def test_per_token_distribution_equals_what_hf_generate_samples_from(temperature, top_k, top_p):
    m = _llama()
    prompts = _prefixes()
    ids, att = left_pad(prompts, 0)
    steps = 5
    torch.manual_seed(0)
    with torch.no_grad():
        hf = m.generate(
            input_ids=ids,
            attention_mask=att,
            do_sample=True,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            max_new_tokens=steps,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        follow = hf.sequences[:, ids.shape[1] :]
        f = fast_path(m)
        state, logits = f.start(ids, att, max_new_tokens=steps)
        alive = torch.ones(len(prompts), dtype=torch.bool)  # rows that have not sampled EOS (id 2) yet
        for t in range(len(hf.scores)):
            want = torch.log_softmax(hf.scores[t], -1)[alive]  # what HF sampled step t from
            got = torch.log_softmax(sampling_logits(logits, temperature, top_p, top_k), -1)[alive]
            top = torch.softmax(logits[alive] / temperature, -1).max(-1).values  # before any truncation
            kept = torch.isfinite(want)
            assert torch.equal(kept, torch.isfinite(got))  # the same tokens survive top-k / top-p
            assert float((got - want)[kept].abs().max()) < TOL
            if top_k or top_p < 1:
                assert int(kept.sum(-1).max()) < VOCAB  # the truncation is not vacuous
            if top_k:
                assert int(kept.sum(-1).max()) <= top_k
            alive &= follow[:, t] != 2
            logits = f.step(state, follow[:, t])
    assert len(hf.scores) == steps and int(alive.sum()) >= 3
    assert float(top.min()) < 0.9  # spread distributions: the comparison means something


def _chi_square(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's statistic with the rare categories pooled into one; (statistic, degrees of freedom)."""
    n = float(counts.sum())
    exp = probs * n
    big = exp >= min_expected
    obs_b, exp_b = counts[big].double(), exp[big].double()
    obs_r, exp_r = counts[~big].double().sum(), exp[~big].double().sum()
    stat = float(((obs_b - exp_b) ** 2 / exp_b).sum())
    k = int(big.sum())
    if exp_r > 0:
        stat += float((obs_r - exp_r) ** 2 / exp_r)
        k += 1
    return stat, k - 1


def _chi2_quantile_999(df: int) -> float:
    """Wilson-Hilferty approximation of the 0.999 quantile of chi-square(df)."""
    z = 3.090232
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("inverse_cdf", [False, True])
def test_draws_follow_softmax_of_logits_over_temperature(inverse_cdf, monkeypatch):
    """20,000 first tokens drawn by ``generate`` from one prefix, against softmax(HF logits / T): chi-square
    below its 0.999 quantile, and far above it against the T = 1 distribution (the test can tell them apart).
    Both draw algorithms: torch.multinomial (small vocabularies) and the inverse CDF (large ones)."""
    if inverse_cdf:
        monkeypatch.setattr(G, "MULTINOMIAL_MAX_VOCAB", 0)
    m = _llama()
    prompt = _prefixes(1)[0]
    n, T = 20_000, 0.7
    with torch.no_grad():
        ref_logits = m(input_ids=torch.tensor([prompt])).logits[0, -1]
    b = generate(
        m,
        [prompt] * n,
        max_new_tokens=1,
        eos_id=2,
        pad_id=0,
        temperature=T,
        generator=torch.Generator().manual_seed(123),
    )
    counts = torch.bincount(b.responses[:, 0], minlength=VOCAB)
    probs = torch.softmax(ref_logits.double() / T, -1)
    assert float(probs.max()) < 0.5 and int((probs * n >= 5).sum()) > 20  # many categories take part
    stat, df = _chi_square(counts, probs)
    assert stat < _chi2_quantile_999(df), (stat, df)
    wrong, df_w = _chi_square(counts, torch.softmax(ref_logits.double(), -1))
    assert wrong > 3 * _chi2_quantile_999(df_w)


def test_inverse_cdf_never_draws_a_zero_probability_token():
    probs = torch.zeros(4000, 5000)
    probs[:, 7], probs[:, 4999], probs[:, 0] = 0.5, 0.25, 0.25
    got = G.draw(probs, torch.Generator().manual_seed(0))
    assert set(got.tolist()) == {0, 7, 4999}
    share = torch.bincount(got, minlength=5000)[[0, 7, 4999]].double() / 4000
    assert torch.allclose(share, torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64), atol=0.03)


# ---------------------------------------------------------------------------------------------- stop strings
def test_stop_strings_end_a_row_at_the_token_completing_them():
    tok = build_char_tokenizer()

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=True)

    stop = StopStrings([". q:", "=="], decode)  # the char tokenizer: one token per character
    text = "5 is it. q:"  # completes ". q:" at its last character (token 11 of 11)
    rows = [tok(text, add_special_tokens=False)["input_ids"], tok("1 = 2 =", add_special_tokens=False)["input_ids"]]
    steps = [torch.tensor([r[t] for r in rows]) for t in range(len(rows[1]))]
    hits = [stop.hits(steps[: t + 1], torch.tensor([True, True])).tolist() for t in range(len(steps))]
    assert all(h == [False, False] for h in hits)  # "1 = 2 =" never holds "=="; row 0 not yet complete
    steps += [torch.tensor([rows[0][t], 0]) for t in range(len(rows[1]), len(rows[0]))]
    done_at = next(t for t in range(len(steps)) if stop.hits(steps[: t + 1], torch.tensor([True, False]))[0])
    assert done_at == len(rows[0]) - 1
    assert not StopStrings([], decode)  # no strings: the sampler skips the check


def test_generation_stops_after_a_multi_token_string():
    """Greedy text of a real tiny model; a two-character piece of it as the stop string: the response ends at
    the piece's first occurrence (kept in the response), and nothing changes before it."""
    hf = build_char_tokenizer()
    tok = TokenizerAdapter(hf)
    m = build_pocket_model("pocket-0.3m", len(tok), seed=3)
    prompt = [tok.encode_prompt("12 7 to 19:")]
    kw = dict(max_new_tokens=24, eos_id=tok.eos_id, pad_id=tok.pad_id, greedy=True)
    free = generate(m, prompt, **kw)
    text = tok.decode(free.responses[0][free.mask[0].bool()].tolist())
    assert len(text) >= 6, text
    piece = text[3:5]
    end = text.index(piece) + len(piece)
    stopped = generate(m, prompt, stop_strings=StopStrings([piece], tok.decode), **kw)
    got = tok.decode(stopped.responses[0][stopped.mask[0].bool()].tolist())
    assert got == text[:end] and got.endswith(piece)
