"""Held-out evaluation of the TRL-trained policy with pocket's sampler: the same problems, protocol, generator
seeds and grading as a pocket run, so the two backends' eval numbers are one protocol (docs/contracts.md §4)."""

from __future__ import annotations

from pathlib import Path

import torch

from harness.run.records import task_eval_doc, write_step_eval


@torch.no_grad()
def evaluate(cfg, model, tok, task, step: int, run_dir: Path, device) -> dict:
    """avg@k, pass@k, maj@k (and greedy) on the held-out split after ``step`` RL steps -> ``eval/step_<step>.json``."""
    from harness.backends.pocket.generate import eval_metrics, sample_problems, score_responses
    from harness.backends.pocket.trainer import make_generator

    ec = cfg.eval
    problems = task.test[: ec.max_problems] if ec.max_problems else task.test
    k, max_new = ec.n_samples, ec.max_new_tokens or cfg.train.max_new_tokens
    g = make_generator(cfg.seed, step, "eval", device)
    options = {"top_p": ec.top_p, "max_new_tokens": max_new, "greedy": ec.temperature == 0}
    b = sample_problems(model, tok, problems, k, ec.temperature, g, **options)
    metrics = eval_metrics(b, tok, task, problems, k)[0]
    if ec.greedy:
        bg = sample_problems(model, tok, problems, 1, 1.0, None, greedy=True, max_new_tokens=max_new)
        metrics["greedy"] = float(score_responses(bg, tok, task, problems, 1).mean())
    doc = task_eval_doc(cfg, step, len(problems), metrics)
    write_step_eval(run_dir, doc)
    return doc
