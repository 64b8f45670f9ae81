"""Cheap job targets for testing and benchmarking the sweep layer without training anything.

A cell's config holds ``behaviour``; ``behave(cell_dir)`` acts it out and writes result.json like a run, with
the job's environment (SLURM ids, CUDA_VISIBLE_DEVICES, HARNESS_SWEEP_SETUP) so tests can check the placement:
    ok[:TAG]        finish at once (the tag only tells cells apart)
    raise           raise RuntimeError (a failing run)
    sleep:S         sleep S seconds, then finish
    forever[:TAG]   sleep for an hour (to be cancelled, or to get submitit's time-out signal)
    hang            ignore USR2 (submitit's time-out signal) and sleep: SLURM kills it at the time limit
    steps:N         N one-second steps, checkpointing the step count in checkpoints/state.json after each;
                    a requeued attempt resumes from it (result.json records the attempts)
    barrier:N       mark this cell ready, wait (up to 120 s) until N cells of the sweep are ready, then finish at
                    once (many array tasks finishing together); only reads the sibling cell directories
``validate`` is a tiny schema for these configs (unknown keys are errors), standing in for load_config.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import yaml

from harness.io import atomic_write_json

KEYS = ("behaviour", "seed", "x", "y", "method", "model")
ENV_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "CUDA_VISIBLE_DEVICES",
    "HARNESS_SWEEP_SETUP",
)


def as_in_a_terminal() -> None:
    """``preexec_fn`` for a test that Ctrl-Cs a sweep: SIGINT at its default, as under a terminal. A test run started
    as a background job of a non-interactive shell (a CI script's ``cmd &``) passes SIGINT on ignored, and Python
    then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tiny_pocket_base(steps: int = 2, checkpoint_every: int = 1) -> dict:
    """A real pocket run config small enough for sweep tests: a few seconds on the smallest model, no warm start."""
    return {
        "backend": "pocket",
        "method": {"name": "grpo"},
        "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
        "task": {"name": "arith", "test_size": 4},
        "train": {
            "steps": steps,
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "updates_per_rollout": 1,
            "max_new_tokens": 4,
            "checkpoint_every": checkpoint_every,
        },
        "eval": {"every": 0, "n_samples": 1, "max_problems": 2},
        "logging": {"progress": False},
    }


def validate(raw: dict) -> dict:
    for k in raw:
        if k not in KEYS:
            raise ValueError(f"{k}: unknown key. Allowed keys: {', '.join(KEYS)}")
    b = str(raw.get("behaviour", "ok"))
    if b.split(":")[0] not in ("ok", "raise", "sleep", "forever", "hang", "steps", "barrier"):
        raise ValueError(
            f"behaviour: {b!r} is not allowed. Allowed: ok, raise, sleep:S, forever, hang, steps:N, barrier:N"
        )
    return dict(raw)


def behave(cell_dir: str) -> dict:
    d = Path(cell_dir)
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    kind, _, arg = str(cfg.get("behaviour", "ok")).partition(":")
    start = time.time()
    attempts, resumed_from = 1, [0]
    if kind == "raise":
        raise RuntimeError(f"behaviour 'raise' in cell {d.name}")
    if kind == "sleep":
        time.sleep(float(arg))
    elif kind == "forever":
        time.sleep(3600)
    elif kind == "hang":
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        time.sleep(3600)
    elif kind == "barrier":
        (d / "ready").write_text(str(os.getpid()))
        deadline = time.time() + 120
        while len(list(d.parent.glob("*/ready"))) < int(arg) and time.time() < deadline:
            time.sleep(0.05)
    elif kind == "steps":
        state_file = d / "checkpoints" / "state.json"
        state = (
            json.loads(state_file.read_text())
            if state_file.exists()
            else {"step": 0, "attempts": 0, "resumed_from": []}
        )
        state["attempts"] += 1
        state["resumed_from"].append(state["step"])
        resumed_from = state["resumed_from"]
        attempts = state["attempts"]
        atomic_write_json(state_file, state)
        while state["step"] < int(arg):
            time.sleep(1.0)
            state["step"] += 1
            atomic_write_json(state_file, state)
    result = {
        "schema_version": 1,
        "run_id": d.name.rsplit("__", 1)[-1],
        "status": "completed",
        "backend": "testing",
        "behaviour": cfg.get("behaviour"),
        "seed": cfg.get("seed"),
        "attempts": attempts,
        "resumed_from": resumed_from,
        "pid": os.getpid(),
        "wall_time_s": time.time() - start,
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
    }
    atomic_write_json(d / "result.json", result)
    return {"status": "completed", "attempts": attempts}
