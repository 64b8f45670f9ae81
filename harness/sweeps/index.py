"""Where each sweep spec was submitted: ``.harness/sweeps.json`` in the directory ``harness sweep`` runs from maps a
spec's resolved path to the runs directories it was submitted into (latest last), so ``harness status SPEC`` finds
cells submitted with ``--runs-dir`` instead of reporting the default ``runs/<name>`` as never submitted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

INDEX = Path(".harness") / "sweeps.json"


def _read(index: Path) -> dict:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(spec_path: str | os.PathLike, runs_dir: str | os.PathLike, index: Path = INDEX) -> str | None:
    """Add ``runs_dir`` as the latest runs directory of ``spec_path``; the reason when it could not be recorded
    (the sweep goes on: ``harness status`` then needs ``--runs-dir``)."""
    from harness.io import atomic_write_json

    data = _read(index)
    key, value = str(Path(spec_path).resolve()), str(Path(runs_dir).resolve())
    dirs = [d for d in data.get(key, []) if isinstance(d, str) and d != value]
    data[key] = [*dirs, value]
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(index, data)
    except (OSError, ValueError) as e:
        return f"{index}: {e}"
    return None


def runs_dirs(spec_path: str | os.PathLike, index: Path = INDEX) -> list[Path]:
    """The runs directories ``spec_path`` was submitted into from here, latest last ([] when none recorded)."""
    dirs = _read(index).get(str(Path(spec_path).resolve()), [])
    return [Path(d) for d in dirs if isinstance(d, str)]
