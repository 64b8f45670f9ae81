"""Fixture run directories in the layout of docs/contracts.md §2-4, generated per test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.run.records import summarize_metrics


def suite_result(name, value, n_problems=100, n_samples=4, temperature=1.0, top_p=1.0, max_tokens=32, metric=None):
    metric = metric or f"avg@{n_samples}"
    return {
        "suite": name,
        "n_problems": n_problems,
        "n_samples": n_samples,
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
        "metrics": {metric: value},
        "primary": metric,
    }


def _rows(lines) -> list[dict]:
    """The metrics rows among ``lines`` (a deliberately corrupt extra line is skipped, as collect does)."""
    out = []
    for x in lines:
        try:
            obj = json.loads(x)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def make_run(
    root,
    name,
    *,
    method="grpo",
    advantage="grpo",
    model="pocket-1m",
    model_params=1_000_000,
    seed=0,
    task="arith",
    steps=30,
    suites=None,
    law=(0.2, 0.9),
    h0=1.0,
    decay=0.08,
    noise=0.0,
    status="completed",
    write_result=True,
    eval_every=5,
    method_config=None,
    extra_lines=(),
):
    """Write one run dir. Step t logs the entropy of its rollout, H_t = h0·exp(-decay·t) (the policy after t-1
    updates), and reward/mean = -a·exp(H_t) + b (+ noise); the eval at step t scores the policy after t
    updates, so its score is -a·exp(H_{t+1}) + b, exactly on the law (also for eval/step_0.json)."""
    d = Path(root) / name
    (d / "eval").mkdir(parents=True, exist_ok=True)
    a, b = law
    rng = np.random.default_rng(seed + 1000 * len(name))
    cfg = {
        "backend": "pocket",
        "seed": seed,
        "method": {"name": method, **(method_config or {})},
        "model": {"name": model},
        "task": {"name": task},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    suites = suites if suites is not None else {"arith": suite_result("arith", 0.5)}
    lines, ent = [], []
    for t in range(1, steps + 1):
        h = h0 * math.exp(-decay * t)
        ent.append(h)
        rec = {
            "step": t,
            "entropy": h,
            "reward/mean": -a * math.exp(h) + b + noise * rng.standard_normal(),
            "cov/term": decay * h * (1 + 0.05 * rng.standard_normal()),
            "cov/mean": 0.003,
            "cov/top_0.02pct": 5.6,
            "cov/top_0.2pct": 3.1,
            "cov/top_2pct": 1.4,
            "cov/top_20pct": 0.35,
            "cov/top_50pct": 0.15,
        }
        if t > 1:
            rec["entropy/delta"] = h - ent[-2]
        if t % eval_every == 0:
            for s, res in suites.items():
                rec[f"eval/{s}/{res['primary']}"] = -a * math.exp(h0 * math.exp(-decay * (t + 1))) + b
        lines.append(json.dumps(rec))
    lines[len(lines) // 2 : len(lines) // 2] = list(extra_lines)
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    first = {
        s: {**res, "metrics": {res["primary"]: -a * math.exp(h0 * math.exp(-decay)) + b}} for s, res in suites.items()
    }
    (d / "eval" / "step_0.json").write_text(json.dumps({"step": 0, "suites": first}))
    ev = {"step": steps, "suites": suites}
    (d / "eval" / f"step_{steps}.json").write_text(json.dumps(ev))
    if write_result:
        result = {
            "schema_version": 1,
            "run_id": f"{abs(hash(name)) % 16**12:012x}",
            "status": status,
            "backend": "pocket",
            "method": method,
            "advantage": advantage,
            "method_config": {"name": method, **(method_config or {})},
            "model": model,
            "model_params": model_params,
            "task": task,
            "seed": seed,
            "steps": steps,
            "wall_time_s": 1.0,
            "summary": summarize_metrics(_rows(lines)),  # as a backend writes it
            "eval": ev,
            "timing": {},
        }
        (d / "result.json").write_text(json.dumps(result))
    return d


@pytest.fixture
def runs_root(tmp_path):
    return tmp_path / "runs"


@pytest.fixture
def mk():
    """The fixture-run writer ``make_run(root, name, ...)``."""
    return make_run


@pytest.fixture
def suite():
    """The suite-result builder ``suite_result(name, value, ...)``."""
    return suite_result
