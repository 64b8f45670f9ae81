"""``harness table RUNS... [--reference paper] [--import-lm-eval FILE]``: the leaderboard of runs."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.commands._common import collect_runs

ORDER = 90
FORMATS = ("csv", "html", "md", "tex")  # = harness.results.table.FORMATS (tests/results pins it); no pandas at --help
METRICS = ("avg", "pass", "maj")  # = harness.results.table.METRICS


def register(sub) -> None:
    t = sub.add_parser(
        "table",
        help="leaderboard of runs (mean ± 95%% CI over seeds), optionally beside the paper or lm-eval scores",
        description="Rows (model, method), columns = suites, in percent: mean ± half-width of the 95% Student-t "
        "interval over seeds; two averages and Δ vs a baseline. With no RUNS and --reference paper, prints the "
        "paper's Table 2; --import-lm-eval adds models scored by lm-eval as rows of their own.",
    )
    t.add_argument("runs", nargs="*", help="run directories or folders holding them")
    t.add_argument("--format", default="md", choices=sorted(FORMATS), help="output format (default md)")
    t.add_argument(
        "--metric",
        default="avg",
        choices=METRICS,
        help="each suite's avg@k, unbiased pass@k or maj@k, k = the suite's n_samples (default avg); a suite "
        "whose results lack it is refused",
    )
    t.add_argument("--baseline", default=None, help="method the Δ columns compare with (default: grpo if present)")
    t.add_argument("--reference", choices=["paper"], default=None, help="add the paper's Table 2, marked reference")
    t.add_argument(
        "--allow-mixed-protocols",
        action="store_true",
        help="show a suite evaluated under several protocols as one column per protocol (flagged)",
    )
    t.add_argument(
        "--allow-mixed-data",
        action="store_true",
        help="pool runs of one row even when their provenance shows different data (flagged)",
    )
    t.add_argument(
        "--provenance",
        action="store_true",
        help="add a column: short git commit(s) (+dirty) and data hash of each row's runs",
    )
    t.add_argument(
        "--import-lm-eval",
        action="append",
        type=Path,
        default=None,
        metavar="FILE",
        help="add a model scored by lm-eval (its results JSON: lm_eval --output_path, or harness eval "
        "--lm-eval-tasks) as a row of its own, its protocol in the notes; never pooled with runs (repeatable)",
    )
    t.add_argument("--out", type=Path, default=None, help="write to this file instead of stdout")
    t.set_defaults(func=run)


def run(args) -> int:
    from harness.results.table import build_leaderboard, render

    if not args.runs and not args.reference and not args.import_lm_eval:
        raise ValueError(
            "give run directories, --reference paper to print the paper's Table 2, or --import-lm-eval FILE"
        )
    if args.out:
        from harness.run.rundir import check_output_place

        check_output_place(args.out, "--out", "file")
    col = collect_runs(args.runs) if args.runs else None
    lb = build_leaderboard(
        col,
        baseline=args.baseline,
        reference=args.reference,
        allow_mixed_protocols=args.allow_mixed_protocols,
        allow_mixed_data=args.allow_mixed_data,
        provenance=args.provenance,
        imports=args.import_lm_eval,
        metric=args.metric,
    )
    text = render(lb, args.format)
    if args.out:
        from harness.results.report import _write

        _write(args.out, text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
