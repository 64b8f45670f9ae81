"""Checkpoints of a TRL run: ``checkpoints/checkpoint-<optimizer step>/`` as transformers' Trainer writes it
(weights, optimizer, scheduler, RNG states, trainer_state.json) plus ``harness_state.pt`` (RL step, run id,
lineage, method state, previous entropy, timing, warm start), written last and atomically: a folder without it
is a torn save and is never resumed from. Only the newest complete checkpoint is kept."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from harness.run.lineage import foreign_checkpoint

HARNESS_STATE = "harness_state.pt"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """``checkpoints/checkpoint-N`` folders, oldest first."""
    root = Path(run_dir) / "checkpoints"
    found = [(int(m.group(1)), p) for p in root.glob("checkpoint-*") if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest(run_dir: Path, log=print) -> Path | None:
    """The newest complete checkpoint; torn ones (no harness_state.pt) are moved aside with a warning."""
    best = None
    for p in checkpoint_dirs(run_dir):
        if (p / HARNESS_STATE).is_file():
            best = p
            continue
        aside = p.with_name(f"{p.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(p, aside)
        log(f"warning: checkpoint {p} has no {HARNESS_STATE} (a save cut short); moved to {aside}")
    return best


def write_state(folder: Path, state: dict) -> None:
    from harness.io import atomic_save_torch

    atomic_save_torch(Path(folder) / HARNESS_STATE, state)


def read_state(folder: Path) -> dict:
    import torch

    return torch.load(Path(folder) / HARNESS_STATE, map_location="cpu", weights_only=False)


def keep_only(run_dir: Path, folder: Path) -> None:
    """Delete every other ``checkpoint-N`` folder (after ``folder`` is complete)."""
    for p in checkpoint_dirs(run_dir):
        if p.resolve() != Path(folder).resolve():
            shutil.rmtree(p, ignore_errors=True)


def check_lineage(state: dict, cfg, folder: Path) -> None:
    """Refuse a checkpoint folder of another run (harness.run.lineage)."""
    problem = foreign_checkpoint(cfg, state.get("lineage"), state.get("run_id"), folder, Path(folder).parent.parent)
    if problem:
        raise ValueError(problem)
