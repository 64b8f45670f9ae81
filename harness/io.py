"""Crash-safe file writes for run directories: atomic replace (tmp + os.replace) and line-by-line JSONL appends."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable


def _json_default(obj: Any):
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """NaN/inf are not JSON; write them as null (a missing value), never as a fake number."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Write through ``write(fileobj)`` into a temp file next to ``path``, fsync, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    text = json.dumps(_finite(obj), indent=indent, default=_json_default, sort_keys=False) + "\n"
    return atomic_write_text(path, text)


def atomic_save_torch(path: str | os.PathLike, obj: Any) -> Path:
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON object as one line and flush it to disk (a killed run keeps every finished line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_finite(record), default=_json_default) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSONL file; a torn last line (killed mid-write) is skipped, any other bad line is an error."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} is not valid JSON") from None
    return out


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Atomically replace a JSONL file with ``records``."""
    text = "".join(json.dumps(_finite(r), default=_json_default) + "\n" for r in records)
    return atomic_write_text(path, text)


def read_yaml_mapping(path: str | os.PathLike, error: type[Exception], what: str, expected: str) -> dict:
    """A YAML file that must hold a mapping (empty file = {}); ``error`` names the file and the problem."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what.removeprefix('a ')} not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error(f"{path}: {what} must be a mapping with {expected}")
    return data
