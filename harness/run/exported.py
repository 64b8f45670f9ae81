"""The last step of every backend's ``export``: what a model directory carries besides the weights.

``complete_export(model_dir, cfg, run_dir, step)`` writes ``harness_run.json`` (the run it came from:
``harness.run.records.write_model_run``) and the model card ``README.md`` (``harness.run.model_card``), then gives every
file the mode the umask gives a new file (``follow_umask``). Libraries write some files with their own mode:
``save_pretrained``'s safetensors weights are created 0600 whatever the umask, and ``shutil.copytree`` keeps the
source's modes, so without this labmates could not read an exported model.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def follow_umask(root) -> Path:
    """Every file under ``root`` (and ``root`` if it is a file) -> 0666 & ~umask (0777 & ~umask when it had an
    execute bit); every folder, ``root`` included -> 0777 & ~umask. Links are left alone."""
    from harness.io import current_umask, file_mode

    root = Path(root)
    folder_mode = 0o777 & ~current_umask()
    paths = [root] + ([*root.rglob("*")] if root.is_dir() else [])
    for p in paths:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            continue
        want = folder_mode if stat.S_ISDIR(st.st_mode) else file_mode(executable=bool(st.st_mode & 0o111))
        if stat.S_IMODE(st.st_mode) != want:
            os.chmod(p, want)
    return root


def finished_result(run_dir) -> dict | None:
    """The run's ``result.json`` when it finished (completed or insufficient_updates), else None."""
    from harness.run.runner import FINISHED, read_result

    res = read_result(run_dir)
    return res if res and res.get("status") in FINISHED else None


def complete_export(model_dir, cfg, run_dir, step: int | None) -> Path:
    """``harness_run.json`` + ``README.md`` (model card), then the umask's modes on everything in ``model_dir``."""
    from harness.run.model_card import write_model_card
    from harness.run.records import write_model_run

    write_model_run(model_dir, cfg, run_dir, step)
    write_model_card(model_dir, cfg, finished_result(run_dir), run_dir, step)
    return follow_umask(model_dir)
