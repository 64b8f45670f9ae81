"""``harness export RUN_DIR --out DIR``: a trained pocket run as a Hugging Face model directory.

The directory holds the policy's weights at the run's last checkpoint, its tokenizer (reloaded exactly by
``harness.backends.pocket.tokenizer.load_tokenizer``, which ``harness eval`` uses) and ``harness_task.json``: the
run's task, options, test split and eval protocol, so ``harness eval --model DIR --suites <task>`` scores the
model on the problems its training eval used, under the same suite name (one leaderboard column).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def write_task_spec(out: Path, cfg, step: int) -> None:
    """``out/harness_task.json``: the run's task, options, test split and eval protocol (``harness eval`` reads it)."""
    from harness.evals.pocket_suites import MODEL_SUITE_FILE
    from harness.io import atomic_write_json
    from harness.records import task_label

    ec = cfg.eval
    atomic_write_json(
        Path(out) / MODEL_SUITE_FILE,
        {
            "suite": task_label(cfg.task.name),
            "task": cfg.task.name,
            "options": cfg.task.options,
            "test_size": cfg.task.test_size,
            "max_problems": ec.max_problems,
            "protocol": {
                "n_samples": ec.n_samples,
                "temperature": ec.temperature,
                "top_p": ec.top_p,
                "max_tokens": ec.max_new_tokens or cfg.train.max_new_tokens,
            },
            "run_id": cfg.run_id(),
            "step": step,
            "method": cfg.method_name,
        },
    )


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike) -> Path:
    import torch
    import yaml

    from harness.backends.pocket import models
    from harness.backends.pocket.tokenizer import build_char_tokenizer
    from harness.config import load_config
    from harness.io import check_output_dir

    run_dir, out = Path(run_dir), Path(out)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no config.yaml)")
    cfg = load_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    if cfg.backend != "pocket":
        raise ValueError(
            f"{run_dir}: backend {cfg.backend!r}; export makes model directories of pocket runs (an "
            f"OpenRLHF run saves its own Hugging Face checkpoint)"
        )
    ckpt = run_dir / "checkpoints" / "latest.pt"
    if not ckpt.is_file():
        raise FileNotFoundError(f"{run_dir}: no checkpoint ({ckpt}) to export; train the run first")
    check_output_dir(out, "--out")
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--out {out}: not empty; give a new folder (nothing is overwritten)")
    blob = torch.load(ckpt, map_location="cpu", weights_only=False)
    if blob.get("run_id") not in (None, cfg.run_id()):
        raise ValueError(f"{ckpt} belongs to run {blob.get('run_id')}, not to this run directory's {cfg.run_id()}")
    if models.is_pocket(cfg.model.name):
        tok = build_char_tokenizer()
        model = models.build_pocket_model(cfg.model.name, len(tok), cfg.seed)
    else:
        model, tok = models.load_hf(cfg.model.name, cfg.model.dtype)
    model.load_state_dict(blob["model"])
    model.generation_config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    write_task_spec(out, cfg, int(blob["step"]))
    return out


def handle(args) -> int:
    out = export_run(args.run_dir, args.out)
    spec = json.loads((out / "harness_task.json").read_text())
    print(f"exported step {spec['step']} of run {spec['run_id']} -> {out}")
    print(f"evaluate with: harness eval --model {out} --suites {spec['suite']}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="a trained pocket run as a Hugging Face model directory (for harness eval)",
        description="Write the run's last checkpoint as a model directory (weights, tokenizer, and "
        "its task as an eval suite named like the run's own eval).",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints/)")
    p.add_argument("--out", required=True, help="new folder for the model directory")
    p.set_defaults(func=handle)
