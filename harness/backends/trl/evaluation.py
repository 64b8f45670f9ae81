"""Held-out evaluation of the TRL-trained policy with pocket's sampler: the same problems, protocol, generator
seeds and grading as a pocket run, so the two backends' eval numbers are one protocol (docs/contracts.md §4)."""

from __future__ import annotations

from pathlib import Path

import torch

from harness.run.records import task_eval_doc, write_step_eval


def _sample(model, tok, problems, n, temperature, generator, *, max_new_tokens, top_p=1.0, greedy=False):
    from harness.backends.pocket.generate import generate

    prompts = [tok.encode_prompt(p["prompt"]) for p in problems for _ in range(n)]
    return generate(
        model,
        prompts,
        max_new_tokens=max_new_tokens,
        eos_id=getattr(tok, "stop_ids", tok.eos_id),
        pad_id=tok.pad_id,
        temperature=temperature,
        top_p=top_p,
        greedy=greedy,
        generator=generator,
        chunk_size=512,
    )


def _scores(batch, tok, task, problems, n) -> torch.Tensor:
    texts = [tok.decode(r[m.bool()].tolist()) for r, m in zip(batch.responses.cpu(), batch.mask.cpu())]
    return torch.tensor([task.verify(t, problems[i // n]) for i, t in enumerate(texts)], dtype=torch.float32)


@torch.no_grad()
def evaluate(cfg, model, tok, task, step: int, run_dir: Path, device) -> dict:
    """avg@k (and greedy) on the task's held-out split after ``step`` RL steps -> ``eval/step_<step>.json``."""
    from harness.backends.pocket.trainer import make_generator
    from harness.evals.metrics import summarize

    ec = cfg.eval
    problems = task.test[: ec.max_problems] if ec.max_problems else task.test
    k, max_new = ec.n_samples, ec.max_new_tokens or cfg.train.max_new_tokens
    g = make_generator(cfg.seed, step, "eval", device)
    b = _sample(
        model, tok, problems, k, ec.temperature, g, top_p=ec.top_p, max_new_tokens=max_new, greedy=ec.temperature == 0
    )
    sc = _scores(b, tok, task, problems, k).view(len(problems), k)
    metrics = summarize([{"correct": [bool(x) for x in row]} for row in sc.tolist()], k=k)
    if ec.greedy:
        bg = _sample(model, tok, problems, 1, 1.0, None, greedy=True, max_new_tokens=max_new)
        metrics["greedy"] = float(_scores(bg, tok, task, problems, 1).mean())
    doc = task_eval_doc(cfg, step, len(problems), metrics)
    write_step_eval(run_dir, doc)
    return doc
