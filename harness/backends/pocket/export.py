"""A pocket run as a Hugging Face model directory (``harness export``, ``eval.after_training``).

The directory holds the policy's weights at the run's last checkpoint, its tokenizer (reloaded exactly by
``harness.backends.pocket.tokenizer.load_tokenizer``) and ``harness_task.json``: the run's task, options, test
split and eval protocol, so ``harness eval --model DIR --suites <task>`` scores the model on the problems its
training eval used, under the same suite name (one leaderboard column).
"""

from __future__ import annotations

from pathlib import Path

from harness.run.records import MODEL_SUITE_FILE


def write_task_spec(out: Path, cfg, step: int) -> None:
    """``out/harness_task.json``: the run's task, options, test split and eval protocol, and the run it came from
    (run id, method, seed, step: ``harness eval`` attaches its results to that run)."""
    from harness.io import atomic_write_json
    from harness.run.records import task_label

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
            "seed": cfg.seed,
        },
    )


def export_run(cfg, run_dir: Path, out: Path) -> Path:
    """Write the run's last checkpoint (``checkpoints/latest.pt``) as a model directory at ``out`` (new or empty)."""
    import torch

    from harness.backends.pocket import models
    from harness.backends.pocket.tokenizer import build_char_tokenizer
    from harness.io import check_output_dir
    from harness.run.exported import complete_export

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
    return complete_export(out, cfg, run_dir, int(blob["step"]))  # run marker, model card, the umask's modes
