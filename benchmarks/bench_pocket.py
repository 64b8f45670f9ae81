"""Pocket RL step vs Hugging Face TRL's GRPOTrainer doing the same work, and vs the FLOP bound (`make bench-pocket`).

Equal work, per RL step (both sides): the same warm-started pocket model (saved as an HF directory and loaded by
both), 16 countdown prompts from the same training set x 8 samples at T=1, at most 8 new tokens, GRPO
advantages (group mean/std), then 8 AdamW updates (lr 5e-4, grad clip 1, no weight decay, beta 0 = no
reference model) of 16 responses each with the token-mean PPO-clip loss (eps 0.2); one thread, float32, no
gradient checkpointing, no evaluation, no dynamic filtering. TRL: per_device_train_batch_size=16,
gradient_accumulation_steps=1, steps_per_generation=8, num_generations=8, loss_type=dapo (token mean over the
mini-batch), scale_rewards=group. What differs: each side draws its own prompts (same pool, other random
order) and samples its own responses, so token counts differ a little (reported); TRL computes old log-probs
with a second forward, pocket's fast path takes them from the sampling pass; TRL also computes the token
entropy in every update (pocket only when the method needs it) and runs the Trainer/accelerate machinery.

Arms, interleaved ABBA per round (each arm a fresh subprocess; only steps after a warm-up step are timed):
  pocket     the pocket backend as shipped (fast path)
  reference  the pocket backend on the transformers forward (``use_reference_path``): the before/after
  trl        TRL 1.16.0 in .venv-trl (scripts/setup_trl.sh); skipped with a note when that venv is missing

    python benchmarks/bench_pocket.py [--sizes pocket-0.3m pocket-1m] [--rounds 2] [--steps 4] [--markdown]
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
PROMPTS, SAMPLES, UPDATES, NEW_TOKENS, LR = 16, 8, 8, 8, 5e-4
BASE = ROOT / "sweeps" / "configs" / "pocket_countdown.yaml"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------- set-up
def run_config(model: str, overrides=()):
    from harness.run.config import load_config

    return load_config(
        str(BASE),
        overrides=[
            f"model.name={model}",
            f"train.prompts_per_step={PROMPTS}",
            f"train.samples_per_prompt={SAMPLES}",
            f"train.updates_per_rollout={UPDATES}",
            f"train.micro_batch_size={PROMPTS * SAMPLES // UPDATES}",
            f"train.max_new_tokens={NEW_TOKENS}",
            f"train.lr={LR}",
            "train.dynamic_filtering=false",
            "train.threads=1",
            "eval.every=0",
            "logging.progress=false",
            "method={name: grpo}",
            *overrides,
        ],
    )


def load_tokenizer(model_dir):
    """The pocket char tokenizer from a saved directory. AutoTokenizer is not used: with config.json's
    model_type qwen2 it returns a Qwen2Tokenizer that drops the spaces (transformers 5.15)."""
    from transformers import PreTrainedTokenizerFast

    from harness.backends.pocket.tokenizer import build_char_tokenizer

    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    probe = "<bos>15 16 to 31:"
    if tok(probe)["input_ids"] != build_char_tokenizer()(probe)["input_ids"]:
        raise SystemExit(f"error: the tokenizer saved in {model_dir} does not encode like the pocket tokenizer")
    return tok


def warm_started_dir(size: str, root: Path) -> Path:
    """The pocket warm start of ``size`` (cached like any run's) saved as a Hugging Face model directory."""
    from harness.backends.pocket import models
    from harness.backends.pocket.tasks import make_task
    from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
    from harness.backends.pocket.warmstart import cache_key, load_or_train

    cfg = run_config(size)
    tok = TokenizerAdapter(build_char_tokenizer())
    out = root / cache_key(cfg, len(tok))
    if (out / "config.json").exists():
        return out
    task = make_task(cfg.task.name, cfg.task.test_size, cfg.task.options)
    state, _ = load_or_train(cfg, tok, task, log=lambda *a: None)
    model = models.build_pocket_model(size, len(tok), cfg.seed)
    model.load_state_dict(state)
    tmp = Path(tempfile.mkdtemp(dir=root))
    model.save_pretrained(tmp)
    tok.hf.save_pretrained(tmp)
    tmp.rename(out)
    return out


def matmul_gflops(n: int = 1024, repeats: int = 8) -> float:
    """Best single-thread float32 GEMM throughput (n x n x n) on this machine, GFLOP/s."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def matmul_params(model_dir: Path) -> int:
    """Weights that take part in matmuls per token (every linear layer incl. the LM head; not the embedding)."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir)
    d, i, L, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    kv = d // c.num_attention_heads * c.num_key_value_heads
    return L * (d * d + 2 * d * kv + d * d + 3 * d * i) + d * v


# ---------------------------------------------------------------------------------------------- workers
def worker_pocket(model_dir: str, steps: int, warmup: int, reference: bool) -> list[dict]:
    """RL steps of the pocket trainer; per step: wall/CPU seconds and the generation / old-log-prob split."""
    import torch

    from harness.backends.pocket import generate as G
    from harness.backends.pocket import trainer as T

    G.use_reference_path(reference)
    from harness.backends.pocket.tokenizer import TokenizerAdapter

    tr = T.PocketTrainer(run_config(model_dir), tempfile.mkdtemp(), log=lambda *a: None)
    tr.setup()
    tr.tok = TokenizerAdapter(load_tokenizer(model_dir))  # not the AutoTokenizer that load_hf returns
    torch.set_num_threads(1)
    acc = {"gen": 0.0, "old_lp": 0.0, "tokens": 0.0}
    gen, chunked = T.generate, tr._logprobs_chunked

    def timed_gen(*a, **k):
        t0 = time.process_time()
        out = gen(*a, **k)
        acc["gen"] += time.process_time() - t0
        acc["tokens"] += float(out.attention_mask.sum())
        return out

    def timed_old(*a, **k):
        t0 = time.process_time()
        out = chunked(*a, **k)
        if not torch.is_grad_enabled():
            acc["old_lp"] += time.process_time() - t0
        return out

    T.generate, tr._logprobs_chunked = timed_gen, timed_old
    rows = []
    for step in range(1, warmup + steps + 1):
        acc.update(gen=0.0, old_lp=0.0, tokens=0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        m = tr.train_step(step)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if step > warmup:
            rows.append(
                {
                    "wall": wall,
                    "cpu": cpu,
                    "gen": acc["gen"],
                    "old_lp": acc["old_lp"],
                    "update": cpu - acc["gen"] - acc["old_lp"],
                    "resp_len": m["response/length"],
                    "tokens": acc["tokens"],
                    "reward": m["reward/mean"],
                }
            )
    return rows


def worker_trl(model_dir: str, steps: int, warmup: int) -> list[dict]:
    """RL steps of TRL's GRPOTrainer (one RL step = one generation + 8 optimizer steps)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness.backends.pocket.tasks import make_task
    from harness.backends.pocket.tokenizer import TokenizerAdapter

    torch.set_num_threads(1)
    cfg = run_config(model_dir)
    task = make_task(cfg.task.name, cfg.task.test_size, cfg.task.options)
    hf_tok = load_tokenizer(model_dir)
    tok = TokenizerAdapter(hf_tok)
    bos = hf_tok.bos_token
    texts = [bos + p["prompt"] for p in task.train]
    if hf_tok(texts[:1])["input_ids"][0] != tok.encode_prompt(task.train[0]["prompt"]):
        raise SystemExit("error: TRL would tokenize the prompts differently from the pocket backend")
    data = Dataset.from_dict({"prompt": texts, "idx": list(range(len(texts)))})

    def reward(prompts, completions, idx, **_):
        return [float(task.verify(c, task.train[i])) for c, i in zip(completions, idx)]

    n_opt = UPDATES * (warmup + steps)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        seed=0,
        max_steps=n_opt,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        per_device_train_batch_size=PROMPTS * SAMPLES // UPDATES,
        gradient_accumulation_steps=1,
        steps_per_generation=UPDATES,
        num_generations=SAMPLES,
        num_iterations=1,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        report_to="none",
        logging_steps=10**6,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    stamps = []

    class Stamp(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if state.global_step % UPDATES == 0:
                stamps.append({"t": time.perf_counter(), "c": time.process_time(), **acc})

    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=hf_tok, callbacks=[Stamp()]
    )
    acc = {"gen": 0.0, "old_lp": 0.0, "len": 0.0, "tokens": 0.0, "reward": 0.0}
    gen, lp = trainer._generate, trainer._get_per_token_logps_and_entropies
    score = trainer._generate_and_score_completions

    def timed_gen(*a, **k):
        t0 = time.process_time()
        out = gen(*a, **k)
        acc["gen"] += time.process_time() - t0
        return out

    def timed_lp(*a, **k):
        t0 = time.process_time()
        out = lp(*a, **k)
        if not torch.is_grad_enabled():
            acc["old_lp"] += time.process_time() - t0
        return out

    def timed_score(*a, **k):
        out = score(*a, **k)
        cm = out["completion_mask"].float()
        acc["len"] = float(cm.sum(-1).mean())
        acc["tokens"] = float(out["prompt_mask"].sum() + cm.sum())
        acc["reward"] = float(trainer._metrics["train"]["reward"][-1]) if trainer._metrics["train"]["reward"] else 0.0
        return out

    trainer._generate, trainer._get_per_token_logps_and_entropies = timed_gen, timed_lp
    trainer._generate_and_score_completions = timed_score
    trainer.train()
    stamps.append({"t": time.perf_counter(), "c": time.process_time(), **acc})
    rows = []
    for k in range(warmup, len(stamps) - 1):
        a, b = stamps[k], stamps[k + 1]
        wall, cpu = b["t"] - a["t"], b["c"] - a["c"]
        g, o = b["gen"] - a["gen"], b["old_lp"] - a["old_lp"]
        rows.append(
            {
                "wall": wall,
                "cpu": cpu,
                "gen": g,
                "old_lp": o,
                "update": cpu - g - o,
                "resp_len": b["len"],
                "tokens": b["tokens"],
                "reward": b["reward"],
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- driver
def run_arm(arm: str, model_dir: Path, steps: int, warmup: int, trl_python: Path) -> list[dict]:
    py = str(trl_python) if arm == "trl" else sys.executable
    cmd = [
        py,
        str(Path(__file__).resolve()),
        "--worker",
        arm,
        "--model-dir",
        str(model_dir),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
    ]
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{arm} worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["pocket-0.3m", "pocket-1m"])
    ap.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each arm runs twice per round)")
    ap.add_argument("--steps", type=int, default=4, help="timed RL steps per arm run")
    ap.add_argument("--warmup", type=int, default=1, help="untimed RL steps first")
    ap.add_argument("--trl-python", default=str(ROOT / ".venv-trl" / "bin" / "python"))
    ap.add_argument("--arms", nargs="+", default=["pocket", "reference", "trl"])
    ap.add_argument("--json", help="also write the raw per-step rows here")
    ap.add_argument("--worker", choices=["pocket", "reference", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.worker == "trl":
            rows = worker_trl(args.model_dir, args.steps, args.warmup)
        else:
            rows = worker_pocket(args.model_dir, args.steps, args.warmup, reference=args.worker == "reference")
        print(json.dumps(rows))
        return 0
    arms = list(args.arms)
    trl_python = Path(args.trl_python)
    notes = []
    if "trl" in arms and not trl_python.exists():
        arms.remove("trl")
        notes.append(f"TRL arm skipped: {trl_python} not found (run scripts/setup_trl.sh)")
    cache = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "entropy-harness") / "bench_pocket"
    cache.mkdir(parents=True, exist_ok=True)
    gflops = matmul_gflops()
    load = os.getloadavg()
    print(
        f"single-thread fp32 matmul: {gflops:.0f} GFLOP/s; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        file=sys.stderr,
    )
    raw, table = {}, []
    for size in args.sizes:
        model_dir = warm_started_dir(size, cache)
        gflops = max(gflops, matmul_gflops())
        res = {a: [] for a in arms}
        per_round = {a: [] for a in arms}
        for r in range(args.rounds):
            order = arms + arms[::-1]  # ABBA: a drift in machine load hits every arm alike
            for arm in order:
                rows = run_arm(arm, model_dir, args.steps, args.warmup, trl_python)
                res[arm] += rows
                per_round[arm].append(med(rows, "cpu"))
                print(
                    f"{size} round {r + 1} {arm}: {med(rows, 'wall'):.3f} s/step wall, {med(rows, 'cpu'):.3f} CPU",
                    file=sys.stderr,
                )
        raw[size] = res
        P = matmul_params(model_dir)
        tokens = med(res["pocket"], "tokens") if "pocket" in res else med(next(iter(res.values())), "tokens")
        # gen + old-log-prob forwards (2 x 2P per token) + 8 updates covering every response once (6P per token)
        bound = (4 * P + 6 * P) * tokens / (gflops * 1e9)
        for arm in arms:
            rows = res[arm]
            line = {
                "size": size,
                "arm": arm,
                "wall": med(rows, "wall"),
                "cpu": med(rows, "cpu"),
                "gen": med(rows, "gen"),
                "old_lp": med(rows, "old_lp"),
                "update": med(rows, "update"),
                "resp_len": statistics.mean(r["resp_len"] for r in rows),
                "tokens": statistics.mean(r["tokens"] for r in rows),
                "bound": bound,
                "reward": statistics.mean(r["reward"] for r in rows),
            }
            if arm != "pocket" and "pocket" in arms:
                ratios = sorted(a / b for a, b in zip(per_round[arm], per_round["pocket"]))
                line["ratio_vs_pocket"] = (statistics.median(ratios), ratios[0], ratios[-1])
            table.append(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"gflops": gflops, "load": load, "rows": raw}, indent=1))
    print(
        f"\nsingle-thread fp32 matmul {gflops:.0f} GFLOP/s; load average at start {load[0]:.2f}; "
        f"{args.rounds} ABBA rounds x {args.steps} timed RL steps per arm run (medians)\n"
    )
    print(
        "| model | arm | wall s/step | CPU s/step | CPU: generation | old log-probs | updates + rest | "
        "resp. len | tokens/step | reward | ÷ pocket (CPU; range over rounds) | CPU ÷ FLOP bound |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in table:
        rv = t.get("ratio_vs_pocket")
        rtxt = f"{rv[0]:.2f} ({rv[1]:.2f}–{rv[2]:.2f})" if rv else "1"
        print(
            f"| {t['size']} | {t['arm']} | {t['wall']:.3f} | {t['cpu']:.3f} | {t['gen']:.3f} | {t['old_lp']:.3f} | "
            f"{t['update']:.3f} | {t['resp_len']:.2f} | {t['tokens']:.0f} | {t['reward']:.2f} | {rtxt} | "
            f"{t['cpu'] / t['bound']:.1f}× |"
        )
    for size in args.sizes:
        b = next(t["bound"] for t in table if t["size"] == size)
        print(
            f"\n{size}: FLOP bound {b:.3f} s/step (10 x matmul weights x valid tokens / {gflops:.0f} GFLOP/s: "
            f"generation + old-log-prob forwards and 8 updates' forward+backward over all responses)"
        )
    for n in notes:
        print(f"\nnote: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
