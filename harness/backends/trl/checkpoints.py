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

HARNESS_STATE = "harness_state.pt"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def lineage(cfg) -> str:
    """The run's identity without its length: a checkpoint of the same run with fewer steps may be continued."""
    from harness.run.config import config_hash, measuring_items

    return config_hash({k: v for k, v in measuring_items(cfg).items() if k != "train.steps"})


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
    if state.get("lineage") not in (None, lineage(cfg)):
        raise ValueError(
            f"checkpoint {folder} belongs to run {state.get('run_id')}, not to this run ({cfg.run_id()}); move it "
            f"out of the run directory or use another --run-dir"
        )
