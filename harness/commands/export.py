"""``harness export RUN_DIR --out DIR``: a trained run as a Hugging Face model directory (its backend's ``export``).

The directory holds the final policy's weights, its exact tokenizer and ``harness_task.json`` (the run's task,
eval protocol, run id, method, seed and step), so ``harness eval --model DIR`` scores it and attaches the results
to that run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ORDER = 30


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike | None) -> Path:
    """Export the run at ``run_dir`` through its backend (a failed run is refused)."""
    from harness.backends import get_backend
    from harness.run.config import load_stored_config

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = load_stored_config(run_dir)
    result = run_dir / "result.json"
    if result.exists() and _status(result) == "failed":
        raise ValueError(f"{run_dir}: the run failed (result.json status 'failed'); nothing trustworthy to export")
    return get_backend(cfg.backend).export(cfg, run_dir, Path(out) if out else None)


def _status(path: Path) -> str | None:
    from harness.io import read_text

    try:
        data = json.loads(read_text(path))
    except ValueError as e:
        why = str(e).removeprefix(f"{path}: ")
        raise ValueError(f"{path}: unreadable ({why}); cannot tell whether the run finished") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object; cannot tell whether the run finished")
    return data.get("status")


def run(args) -> int:
    out = export_run(args.run_dir, args.out)
    spec = json.loads((out / "harness_task.json").read_text())
    print(f"exported step {spec['step']} of run {spec['run_id']} -> {out}")
    print(f"evaluate with: harness eval --model {out} --suites {spec['suite']}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="a trained run as a Hugging Face model directory (for harness eval)",
        description="Write the run's final policy as a model directory (weights, tokenizer, and its task as an "
        "eval suite named like the run's own eval; the run id, method, seed and step for attaching results).",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints/)")
    p.add_argument("--out", required=True, help="new folder for the model directory")
    p.set_defaults(func=run)
