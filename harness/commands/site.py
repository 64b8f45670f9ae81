"""``harness site RUNS_OR_RESULTS... --out DIR [--serve]``: the static results site (docs/site.md)."""

from __future__ import annotations

import shlex
import sys

ORDER = 150


def register(sub) -> None:
    p = sub.add_parser(
        "site",
        help="static results site: leaderboards, run pages, curves, graded samples (opens from disk)",
        description="One page per sweep (the leaderboard with 95%% intervals, n and paired deltas, sortable and "
        "filterable), per run (config, provenance, status, curves, eval per suite) and a sample viewer for graded "
        "eval outputs. Each path is a runs folder (run directories beneath it) or a committed results folder "
        "(leaderboard.csv from harness report). Open DIR/index.html in a browser; no server needed.",
    )
    p.add_argument("paths", nargs="+", metavar="RUNS_OR_RESULTS", help="runs folders or results folders")
    p.add_argument(
        "--out", required=True, help="folder for the site: new, empty, or a site made by this (only its files replaced)"
    )
    p.add_argument("--serve", action="store_true", help="after building, serve it on localhost (http.server)")
    p.add_argument("--port", type=int, default=8000, help="port for --serve (default 8000; 0 = any free port)")
    p.add_argument("--baseline", default=None, help="method the Δ columns compare with (default: grpo if present)")
    p.add_argument(
        "--allow-mixed-protocols",
        action="store_true",
        help="as harness table: a suite under several protocols becomes one column per protocol",
    )
    p.add_argument(
        "--max-samples",
        type=int,
        default=None,
        help="graded rows kept per run and suite (default 2000; the page says when rows were left out)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.run.rundir import check_output_place
    from harness.site import build_site, serve

    if args.max_samples is not None and args.max_samples < 1:
        raise ValueError(f"--max-samples {args.max_samples}: give a positive number of rows")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: give 0..65535")
    check_output_place(args.out, "--out")
    command = "harness site " + " ".join(shlex.quote(p) for p in args.paths) + f" --out {shlex.quote(args.out)}"
    out = build_site(
        args.paths,
        args.out,
        command=command,
        baseline=args.baseline,
        allow_mixed_protocols=args.allow_mixed_protocols,
        max_samples=args.max_samples,
    )
    print(f"wrote {out}/index.html (open it in a browser)", file=sys.stderr)
    if args.serve:
        serve(out, args.port)
    return 0
