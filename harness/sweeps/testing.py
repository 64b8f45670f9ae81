"""Cheap job targets for testing and benchmarking the sweep layer without training anything.

A cell's config holds ``behaviour``; ``behave(cell_dir)`` acts it out and writes result.json like a run:
    ok              finish at once
    raise           raise RuntimeError (a failing run)
    sleep:S         sleep S seconds, then finish
    forever         sleep for an hour (to be cancelled or to hit its time limit)
    steps:N         N one-second steps, checkpointing the step count in checkpoints/state.json after each;
                    a requeued attempt resumes from it (result.json records the attempts)
    barrier:N       mark this cell ready, wait (up to 120 s) until N cells of the sweep are ready, then finish at
                    once (many array tasks finishing together); only reads the sibling cell directories
``validate`` is a tiny schema for these configs (unknown keys are errors), standing in for load_config.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from harness.io import atomic_write_json

KEYS = ("behaviour", "seed", "x", "y", "method", "model")


def validate(raw: dict) -> dict:
    for k in raw:
        if k not in KEYS:
            raise ValueError(f"{k}: unknown key. Allowed keys: {', '.join(KEYS)}")
    b = str(raw.get("behaviour", "ok"))
    if b.split(":")[0] not in ("ok", "raise", "sleep", "forever", "steps", "barrier"):
        raise ValueError(f"behaviour: {b!r} is not allowed. Allowed: ok, raise, sleep:S, forever, steps:N, barrier:N")
    return dict(raw)


def behave(cell_dir: str) -> dict:
    d = Path(cell_dir)
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    kind, _, arg = str(cfg.get("behaviour", "ok")).partition(":")
    start = time.time()
    attempts = 1
    if kind == "raise":
        raise RuntimeError(f"behaviour 'raise' in cell {d.name}")
    if kind == "sleep":
        time.sleep(float(arg))
    elif kind == "forever":
        time.sleep(3600)
    elif kind == "barrier":
        (d / "ready").write_text(str(os.getpid()))
        deadline = time.time() + 120
        while len(list(d.parent.glob("*/ready"))) < int(arg) and time.time() < deadline:
            time.sleep(0.05)
    elif kind == "steps":
        state_file = d / "checkpoints" / "state.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {"step": 0, "attempts": 0}
        state["attempts"] += 1
        attempts = state["attempts"]
        atomic_write_json(state_file, state)
        while state["step"] < int(arg):
            time.sleep(1.0)
            state["step"] += 1
            atomic_write_json(state_file, state)
    result = {"schema_version": 1, "run_id": d.name.rsplit("__", 1)[-1], "status": "completed",
              "backend": "testing", "behaviour": cfg.get("behaviour"), "seed": cfg.get("seed"),
              "attempts": attempts, "pid": os.getpid(), "wall_time_s": time.time() - start}
    atomic_write_json(d / "result.json", result)
    return {"status": "completed", "attempts": attempts}
