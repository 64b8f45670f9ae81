"""``train(config, run_dir)`` for the OpenRLHF backend: validate, then run the launch command as a subprocess.

The subprocess is exactly what ``launch_command`` prints (``harness.backends.openrlhf.launch``), so a sweep's
``launch.sh`` and ``harness train`` do the same thing; it writes metrics.jsonl, checkpoints/ and result.json.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.backends.openrlhf.flags import build_plan
from harness.backends.openrlhf.launch import require_openrlhf


def command(plan, run_dir) -> list[str]:
    return [plan.python, "-m", "harness.backends.openrlhf.launch", os.path.abspath(os.fspath(run_dir)), "--",
            *plan.argv]


RUNNER_OWNED = ("status", "wall_time_s")  # harness.runner.run sets these itself


def train(config, run_dir, log=None) -> dict:
    """Run one OpenRLHF training run; returns the result.json fields (without status / wall time, which
    ``harness.runner.run`` adds). Bad input raises before Ray starts; a failed run raises RuntimeError."""
    plan = build_plan(config, run_dir)   # config errors first, even where OpenRLHF is missing
    require_openrlhf()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **plan.env}
    out_path = run_dir / "openrlhf.log"
    if log:
        log(f"openrlhf: launching ({len(plan.argv)} flags); output in {out_path}")
    with open(out_path, "ab") as out:
        proc = subprocess.run(command(plan, run_dir), env=env, stdout=out, stderr=subprocess.STDOUT)
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {"status": "failed"}
    if proc.returncode != 0 or result.get("status") != "completed":
        tail = out_path.read_text(errors="replace")[-2000:] if out_path.exists() else ""
        raise RuntimeError(f"OpenRLHF run failed (exit {proc.returncode}); see {out_path}. Last output:\n{tail}")
    return {k: v for k, v in result.items() if k not in RUNNER_OWNED}
