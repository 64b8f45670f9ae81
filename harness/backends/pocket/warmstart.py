"""Supervised warm start: the pocket stand-in for a pretrained base model.

A fresh pocket model is trained with cross-entropy on task answers until its *sampled* (T=1) accuracy on a
fixed probe of training problems reaches ``model.warm_start.target_acc`` (a partial success rate, so RL has
something to improve and entropy to spend). The result is cached per (size, task, seed, warm-start settings),
so a sweep warm-starts each combination once; a file lock stops two parallel runs from doing it twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

import torch

from harness.io import atomic_save_torch
from harness.run.config import RunConfig, config_hash

from .generate import build_batch, generate, token_logprobs
from .models import build_pocket_model

PROBE_SIZE = 128


def cache_root(cfg: RunConfig) -> Path:
    root = cfg.model.cache_dir or os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "entropy-harness"
    return Path(root).expanduser() / "pocket"


def cache_key(cfg: RunConfig, vocab_size: int) -> str:
    ws = cfg.model.warm_start
    # v2: the fast forward path (harness/backends/pocket/fast.py) rounds differently from v1's HF forward
    ident = {
        "size": cfg.model.name,
        "task": cfg.task.name,
        "options": cfg.task.options,
        "test_size": cfg.task.test_size,
        "seed": cfg.seed,
        "warm_start": {
            k: getattr(ws, k) for k in ("target_acc", "max_steps", "batch_size", "lr", "check_every", "min_steps")
        },
        "vocab": vocab_size,
        "max_new_tokens": cfg.train.max_new_tokens,
        "threads": cfg.train.threads,  # the thread count changes float rounding, so the trained weights
        "v": 2,
    }
    return f"{cfg.model.name}-{Path(cfg.task.name).stem}-s{cfg.seed}-{config_hash(ident)}"


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@torch.no_grad()
def sampled_accuracy(model, tok, task, problems, max_new_tokens, generator, temperature=1.0, greedy=False) -> float:
    prompts = [tok.encode_prompt(p["prompt"]) for p in problems]
    b = generate(
        model,
        prompts,
        max_new_tokens=max_new_tokens,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        temperature=temperature,
        greedy=greedy,
        generator=generator,
    )
    texts = [tok.decode(r[m.bool()]) for r, m in zip(b.responses, b.mask)]
    return sum(task.verify(t, p) for t, p in zip(texts, problems)) / len(problems)


def train_warm_start(cfg: RunConfig, tok, task, log=print) -> tuple[dict, dict]:
    """Train from scratch; returns (state_dict, info)."""
    ws = cfg.model.warm_start
    model = build_pocket_model(cfg.model.name, len(tok), cfg.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 17)
    probe = task.train[-PROBE_SIZE:]
    pool = task.train[:-PROBE_SIZE] if len(task.train) > 2 * PROBE_SIZE else task.train
    acc, step, t0 = 0.0, 0, time.time()
    from tqdm.auto import tqdm

    bar = tqdm(
        total=ws.max_steps,
        desc=f"warm start {cfg.model.name}/{Path(cfg.task.name).stem}",
        leave=False,
        disable=not cfg.logging.progress,
        mininterval=1.0,
    )
    while step < ws.max_steps:
        idx = torch.randint(len(pool), (ws.batch_size,), generator=g).tolist()
        probs = [pool[i] for i in idx]
        batch = build_batch(
            [tok.encode_prompt(p["prompt"]) for p in probs],
            [tok.encode_answer(task.sft_answer(p)) for p in probs],
            tok.pad_id,
        )
        logp, _ = token_logprobs(model, batch)
        loss = -(logp.sum() / batch.mask.sum())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        bar.update(1)
        if step >= ws.min_steps and step % ws.check_every == 0:
            acc = sampled_accuracy(model, tok, task, probe, cfg.train.max_new_tokens, g)
            model.train()
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.2f}")
            if acc >= ws.target_acc:
                break
    bar.close()
    info = {"steps": step, "probe_acc": acc, "target_acc": ws.target_acc, "time_s": round(time.time() - t0, 2)}
    if acc < ws.target_acc:
        log(f"warm start: reached max_steps={ws.max_steps} at probe accuracy {acc:.3f} < target {ws.target_acc}")
    return model.state_dict(), info


def load_or_train(cfg: RunConfig, tok, task, log=print) -> tuple[dict, dict]:
    """Cached warm-start weights for this (size, task, seed, settings); trains them on a cache miss."""
    root = cache_root(cfg)
    key = cache_key(cfg, len(tok))
    path = root / f"{key}.pt"
    with _file_lock(root / f".{key}.lock"):
        if path.exists():
            try:
                blob = torch.load(path, map_location="cpu", weights_only=False)
                if not isinstance(blob, dict) or not isinstance(blob.get("state_dict"), dict) or "info" not in blob:
                    raise ValueError("not a warm-start cache entry")
                return blob["state_dict"], dict(blob["info"], cached=True, path=str(path))
            except Exception as e:  # noqa: BLE001 - torn/corrupt entry: keep it aside and train it again
                aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
                os.replace(path, aside)
                log(
                    f"warning: warm-start cache entry {path} is unreadable ({type(e).__name__}: {str(e)[:120]}); "
                    f"moved to {aside}, training the warm start again"
                )
        with torch.random.fork_rng(devices=[]):
            state, info = train_warm_start(cfg, tok, task, log=log)
        atomic_save_torch(path, {"state_dict": state, "info": info})
        log(f"warm start: {info['steps']} steps, probe accuracy {info['probe_acc']:.3f} in {info['time_s']}s -> {path}")
        return state, dict(info, cached=False, path=str(path))


def restore(model, state: dict, info: dict) -> None:
    """Load warm-start weights into ``model``; weights that do not fit are an error naming the cache entry (never
    a fresh model trained as if warm-started)."""
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(
            f"warm start {info.get('path', '(just trained)')} does not fit the model ({first[:160]}); delete that "
            f"cache entry to train it again"
        ) from None
