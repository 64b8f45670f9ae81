"""A TRL run's newest checkpoint as a model directory ``harness eval`` loads: weights (``save_pretrained``), the
tokenizer (a pocket one marked exact, reloaded by pocket's loader), stop ids in generation_config,
``harness_task.json`` (the run's task as an eval suite, pocket's format) and ``harness_run.json``."""

from __future__ import annotations

from pathlib import Path

from harness.run.records import write_model_run

from . import checkpoints


def export_run(cfg, run_dir: Path, out: Path | None = None) -> Path:
    """``out`` (new or empty), else ``RUN/export/step_<N>`` (made once, reused)."""
    from transformers import AutoModelForCausalLM

    from harness.backends.pocket.export import write_task_spec
    from harness.backends.pocket.pretrained import export_hf
    from harness.io import check_output_dir

    from .loop import build_tokenizer

    run_dir = Path(run_dir)
    ckpt = checkpoints.latest(run_dir)
    if ckpt is None:
        raise FileNotFoundError(f"{run_dir}: no checkpoint (checkpoints/checkpoint-N/) to export; train the run first")
    state = checkpoints.read_state(ckpt)
    if state.get("run_id") not in (None, cfg.run_id()):
        raise ValueError(f"{ckpt} belongs to run {state.get('run_id')}, not to this run directory's {cfg.run_id()}")
    step = int(state["step"])
    if out is None:
        out = run_dir / "export" / f"step_{step}"
        if (out / "harness_task.json").is_file():
            return out
    else:
        out = Path(out)
        check_output_dir(out, "--out")
        if out.is_dir() and any(out.iterdir()):
            raise ValueError(f"--out {out}: not empty; give a new folder (nothing is overwritten)")
    import torch

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=getattr(torch, cfg.model.dtype))
    export_hf(model, build_tokenizer(cfg), out)
    write_task_spec(out, cfg, step)
    write_model_run(out, cfg, run_dir, step)
    return out
