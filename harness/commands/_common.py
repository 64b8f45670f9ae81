"""Helpers shared by several commands: reading runs, image formats, count flags, the code sandbox, the resubmit
hint."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path


def collect_runs(runs):
    """The runs under ``runs`` (harness.results.collect), each file it could not read named on stderr."""
    from harness.results.collect import collect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        col = collect(runs)
    for w in col.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return col


def image_formats(text: str) -> tuple[str, ...]:
    """``--formats png,pdf`` as a tuple; one error naming what is allowed."""
    formats = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in formats if x not in ("png", "pdf", "svg")]
    if bad or not formats:
        raise ValueError(f"--formats {text!r}: allowed png, pdf, svg")
    return formats


def positive(args, names: tuple[str, ...], minimum: int | float = 1) -> None:
    """Refuse meaningless counts/limits up front: ``--flag`` values below ``minimum``."""
    for name in names:
        v = getattr(args, name, None)
        if v is not None and v < minimum:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} {v}: must be >= {minimum}")


def make_sandbox(python, workers, wall):
    """The code-grading sandbox (described on stderr); ``wall`` seconds per program, None for its default."""
    from harness.evals.sandbox import Limits, Sandbox

    lim = Limits(wall_s=wall, cpu_s=int(wall)) if wall else None
    sb = Sandbox(python=python, workers=workers, limits=lim)
    print(sb.describe(), file=sys.stderr)
    return sb


def print_resubmit_hint(rows, spec: str | Path, runs_dir: Path) -> None:
    """After a sweep's status table: the command that resubmits only its failed cells."""
    failed = [r for r in rows if r.state == "failed"]
    if failed:
        print(f"\n{len(failed)} failed. Resubmit only those: harness sweep {spec} --runs-dir {runs_dir} --only failed")
