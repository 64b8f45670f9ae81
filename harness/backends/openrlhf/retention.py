"""Rotation of OpenRLHF's Hugging Face checkpoint copies: keep the newest K ``<ckpt.path>/global_step<N>_hf``.

OpenRLHF 0.11.2 rotates its DeepSpeed checkpoints (``<ckpt.path>/_actor``, ``--ckpt.max_num``: before each save it
deletes the oldest down to max_num - 1) but writes a full HF copy at every save with ``--ckpt.save_hf`` and never
deletes one (``ppo_actor.py`` ``save_checkpoint``): ~15 GB x 260 saves for a 7B cell of the paper sweep. The
plug-in calls ``rotation`` around upstream's ``save_logs_and_checkpoints`` in the trainer process (after its
``ray.get`` every rank has finished writing): before a save it deletes the oldest copies down to K - 1, as
upstream does for DeepSpeed, so K copies exist once the new one is written; after it, down to K. The newest copy is
never deleted, so with K = 1 two copies exist while the next one is written. The final model
(``--ckpt.output_dir``, checkpoints/final) is elsewhere and never touched. Each save appends what it found on disk
right after the save, the peak, to ``<ckpt.path>/retention.jsonl`` (the CPU rehearsal checks it).

Why a hook and not a watcher in the launcher: the hook runs exactly when a save has completed, so it never mistakes a
copy still being written for the newest complete one, needs no polling process to start and stop, and works the
same on every node of a multi-node job (the trainer process writes the run directory already: metrics.jsonl).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

HF_COPY = re.compile(r"global_step(\d+)_hf")
DS_COPY = re.compile(r"global_step(\d+)")
LOG_FILE = "retention.jsonl"


def peak(keep: int) -> int:
    """HF copies on disk at the peak when ``keep`` are kept: K, and 2 for K = 1 (the newest stays while the next is
    written); 0 when none are written."""
    return 0 if keep <= 0 else max(keep, 2)


def copies(folder: Path, pattern: re.Pattern = HF_COPY) -> list[Path]:
    """The checkpoint folders in ``folder`` whose name is ``pattern``, oldest (lowest step) first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := pattern.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def prune(ckpt_path, keep: int, log=print) -> list[Path]:
    """Delete the oldest HF copies in ``ckpt_path`` until ``keep`` remain; the newest always stays (``keep`` < 1
    counts as 1). Returns what was deleted."""
    found = copies(Path(ckpt_path))
    doomed = found[: max(len(found) - max(keep, 1), 0)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
        log(f"harness: deleted {path} (keep the newest {max(keep, 1)} Hugging Face copies)")
    return doomed


def record(ckpt_path, step: int, keep: int, deleted: list[Path]) -> dict:
    """One line of ``retention.jsonl``: the HF copies and DeepSpeed checkpoints present right after step's save."""
    ckpt_path = Path(ckpt_path)
    row = {
        "step": step,
        "time": time.time(),
        "keep_hf": keep,
        "hf": [p.name for p in copies(ckpt_path)],
        "deepspeed": [p.name for p in copies(ckpt_path / "_actor", DS_COPY)],
        "deleted": [p.name for p in deleted],
    }
    with open(ckpt_path / LOG_FILE, "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


@contextmanager
def rotation(args, global_step: int, keep: int | None, log=print):
    """Around upstream's ``save_logs_and_checkpoints(global_step)``: make room before its HF save, record the peak
    and delete down to ``keep`` after it. A no-op when the step saves nothing or no HF copies are written."""
    ckpt = args.ckpt
    saving = bool(ckpt.save_hf) and keep is not None and global_step % ckpt.save_steps == 0
    if not saving:
        yield
        return
    path = Path(ckpt.path)
    deleted = prune(path, keep - 1, log)
    yield
    row = record(path, global_step, keep, deleted)
    if len(row["hf"]) > keep:
        prune(path, keep, log)
