"""Run directories kept in the repository as compressed archives (results/mechanism/runs/*.tar.xz).

``pack(runs_dir, out)`` writes the files an analysis reads (``result.json``, ``config.yaml``, ``metrics.jsonl``,
``eval/*.json``) of every run directory under ``runs_dir`` into one ``.tar.xz`` (sorted, mtime 0, no owner:
the same runs give the same bytes); checkpoints, logs and TensorBoard files are left out.
``unpacked(path)`` is a context manager: a folder holding ``*.tar.xz`` archives and no run directory of its own is
extracted to a temporary folder (removed afterwards), anything else is passed through unchanged.

    python -m harness.results.archive RUNS_DIR OUT.tar.xz
"""

from __future__ import annotations

import contextlib
import io
import sys
import tarfile
import tempfile
from pathlib import Path

KEPT = ("result.json", "config.yaml", "metrics.jsonl")
SUFFIX = ".tar.xz"


def _run_files(runs_dir: Path) -> list[Path]:
    files = []
    for result in sorted(runs_dir.rglob("result.json")):
        d = result.parent
        files += [d / k for k in KEPT if (d / k).is_file()]
        files += sorted((d / "eval").glob("*.json")) if (d / "eval").is_dir() else []
    return files


def pack(runs_dir, out) -> int:
    """Archive the analysed files of every run (a directory holding result.json) under ``runs_dir``; returns
    the number of runs. Raises ValueError when there is none."""
    runs_dir, out = Path(runs_dir), Path(out)
    files = _run_files(runs_dir)
    n_runs = sum(f.name == "result.json" for f in files)
    if not n_runs:
        raise ValueError(f"{runs_dir}: no run directory (holding result.json) to archive")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        for f in files:
            data = f.read_bytes()
            info = tarfile.TarInfo(f.relative_to(runs_dir).as_posix())
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return n_runs


def archives(path) -> list[Path]:
    """The ``*.tar.xz`` archives directly in ``path`` when it holds no run directory of its own, else []."""
    path = Path(path)
    if not path.is_dir() or any(path.rglob("result.json")):
        return []
    return sorted(path.glob("*" + SUFFIX))


@contextlib.contextmanager
def unpacked(path):
    """Yield a folder of run directories: ``path`` itself, or its archives extracted to a temporary folder."""
    found = archives(path)
    if not found:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="runs-") as tmp:
        for a in found:
            dest = Path(tmp) / a.name[: -len(SUFFIX)]
            with tarfile.open(a, "r:xz") as tar:
                tar.extractall(dest, filter="data")  # refuses absolute paths, links out of dest, devices
        yield Path(tmp)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].endswith(SUFFIX):
        print(f"usage: python -m harness.results.archive RUNS_DIR OUT{SUFFIX}", file=sys.stderr)
        return 2
    try:
        n = pack(argv[0], argv[1])
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{argv[1]}: {n} runs, {Path(argv[1]).stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
