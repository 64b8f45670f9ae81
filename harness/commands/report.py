"""``harness report RUNS_DIR --out DIR``: leaderboard.{md,csv}, standard figures and law fits for a sweep's runs."""

from __future__ import annotations

from pathlib import Path

from harness.commands._common import collect_runs, image_formats

ORDER = 110


def register(sub) -> None:
    r = sub.add_parser(
        "report",
        help="leaderboard.{md,csv}, standard figures and law fits for a sweep's runs",
        description="What `harness sweep --results-dir` writes after a sweep, from existing runs.",
    )
    r.add_argument("runs_dir", help="folder holding the run directories (e.g. runs/quickstart)")
    r.add_argument("--out", type=Path, required=True, help="output folder (e.g. results/quickstart)")
    r.add_argument("--score-key", default="auto", help="score for the law and score figures (default auto)")
    r.add_argument("--formats", default="png,pdf", help="comma-separated image formats (default png,pdf)")
    r.add_argument("--reference", choices=["paper"], default=None, help="add the paper's Table 2 to the leaderboard")
    r.set_defaults(func=run)


def run(args) -> int:
    from harness.results.report import write_sweep_report
    from harness.run.rundir import check_output_place

    if not Path(args.runs_dir).is_dir():
        raise FileNotFoundError(f"no such runs directory: {args.runs_dir}")
    check_output_place(args.out, "--out")
    collect_runs([args.runs_dir])  # the files it cannot read are named here (the report keeps them in its notes)
    for p in write_sweep_report(args.runs_dir, args.out, args.score_key, image_formats(args.formats), args.reference):
        print(p)
    return 0
