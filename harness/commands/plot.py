"""``harness plot RUNS... --out DIR``: the standard figures (PNG and PDF) from runs."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.commands._common import collect_runs, image_formats

ORDER = 100


def register(sub) -> None:
    p = sub.add_parser("plot", help="standard figures (PNG and PDF) from runs")
    p.add_argument("runs", nargs="+", help="run directories or folders holding them")
    p.add_argument("--out", type=Path, required=True, help="folder for the figures")
    p.add_argument(
        "--score-key",
        default="auto",
        help="score for score-vs-step/entropy: auto (eval/<suite>/<metric> if logged, else reward/mean) "
        "or any metrics.jsonl key",
    )
    p.add_argument("--only", action="append", default=None, help="make only this figure (repeatable)")
    p.add_argument("--formats", default="png,pdf", help="comma-separated image formats (default png,pdf)")
    p.add_argument("--include-incomplete", action="store_true", help="also plot runs without result.json")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.results.plots import FIGURES, plot_all
    from harness.results.points import resolve_score_key
    from harness.run.rundir import check_output_place

    formats = image_formats(args.formats)
    check_output_place(args.out, "--out")
    if args.only:
        unknown = [o for o in args.only if o not in FIGURES]
        if unknown:
            raise ValueError(f"unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}")
    col = collect_runs(args.runs)
    if col.completed.empty and not args.include_incomplete:
        raise ValueError("no completed run (result.json) to plot; pass --include-incomplete to plot partial runs")
    key = resolve_score_key(col, args.score_key)
    written, skipped = plot_all(col, args.out, key, args.include_incomplete, formats, args.only)
    for p in written:
        print(p)
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    return 0 if written else 1
