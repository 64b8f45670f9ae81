"""Build the project's wheel from a copy of the tree, as ``pip`` builds it in ``make setup`` (no build isolation:
the venv's setuptools; no network)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path | None]:
    """``pip wheel -q`` of a copy of the tree (setuptools writes build/ and *.egg-info into the source): the process
    (its output is what a quiet ``make setup`` prints) and the wheel, None when the build failed."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, src / name)
    for name in ("harness", "methods", "baselines", "evals"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out_dir = tmp_path / "dist"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out_dir),
        str(src),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wheels = sorted(out_dir.glob("*.whl")) if out.returncode == 0 else []
    return out, (wheels[0] if wheels else None)
