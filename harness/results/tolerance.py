"""Committed results compared with a stated tolerance, never byte for byte.

A committed result (``mechanism.json``, ``theorem.json``, ...) recomputed on another CPU differs in the last bits
of its floats: BLAS kernels, vector widths and fused multiply-add change the rounding of sums (an AMD EPYC machine
moved ~16 pooled correlations by <= 3e-15 relative). ``json_differences`` compares two parsed JSON documents the
way a claim is meant: keys, list lengths, integers, strings, booleans and verdicts equal; floats within
``rel`` relative (or ``abs_`` absolute, for values near zero). A run whose data changed moves its numbers by far
more than that, so the comparison still fails then (tests/results/test_mechanism_committed.py checks it by
mutation).

    python -m harness.results.tolerance EXPECTED.json ACTUAL.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

REL = 1e-9
ABS = 1e-12


def _close(a: float, b: float, rel: float, abs_: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def json_differences(expected, actual, *, rel: float = REL, abs_: float = ABS, path: str = "$") -> list[str]:
    """Where ``actual`` differs from ``expected`` beyond the tolerance: one line per difference (JSON path,
    both values); [] when they agree. Types must agree: an int is never equal to a float."""
    if type(expected) is not type(actual):
        return [f"{path}: {expected!r} ({type(expected).__name__}) vs {actual!r} ({type(actual).__name__})"]
    if isinstance(expected, dict):
        only = sorted(set(expected) ^ set(actual))
        out = [f"{path}: keys {only} in only one"] if only else []
        for k in sorted(expected.keys() & actual.keys()):
            out += json_differences(expected[k], actual[k], rel=rel, abs_=abs_, path=f"{path}.{k}")
        return out
    if isinstance(expected, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items vs {len(actual)}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += json_differences(e, a, rel=rel, abs_=abs_, path=f"{path}[{i}]")
        return out
    if isinstance(expected, float):
        return [] if _close(expected, actual, rel, abs_) else [f"{path}: {expected!r} vs {actual!r}"]
    return [] if expected == actual else [f"{path}: {expected!r} vs {actual!r}"]


def file_differences(expected, actual, **tol) -> list[str]:
    """``json_differences`` of two JSON files."""
    read = lambda p: json.loads(Path(p).read_text(encoding="utf-8"))  # noqa: E731
    return json_differences(read(expected), read(actual), **tol)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m harness.results.tolerance EXPECTED.json ACTUAL.json", file=sys.stderr)
        return 2
    diffs = file_differences(*argv)
    print("\n".join(diffs) if diffs else f"equal within rel {REL:g} / abs {ABS:g}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
