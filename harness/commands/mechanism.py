"""``harness mechanism RUNS_DIR --out DIR``: the paper's entropy-mechanism analyses (mechanism.json + figures)."""

from __future__ import annotations

from pathlib import Path

from harness.commands._common import collect_runs, image_formats

ORDER = 120


def register(sub) -> None:
    mc = sub.add_parser(
        "mechanism",
        help="the paper's entropy-mechanism analyses: mechanism.json + figures",
        description="Early consumption, the law per size (pooled and per algorithm), prediction "
        "from the first third, ΔH vs covariance, and the rescue (paired 95% CIs vs "
        "the baseline). Definitions: harness/studies/mechanism.py, docs/mechanism.md.",
    )
    mc.add_argument("runs_dir", help="folder holding the run directories of one sweep (e.g. runs/mechanism)")
    mc.add_argument("--out", type=Path, required=True, help="output folder (e.g. results/mechanism)")
    mc.add_argument("--score-key", default="auto", help="held-out score key (default auto: eval/<suite>/<metric>)")
    mc.add_argument("--baseline", default="grpo", help="method the others are compared with (default grpo)")
    mc.add_argument("--formats", default="png", help="comma-separated image formats (default png)")
    mc.add_argument(
        "--law-family",
        default=None,
        help="comma-separated methods pooled for the law fits (default: those of grpo,rloo,prime present)",
    )
    mc.add_argument(
        "--entropy-key",
        default="auto",
        help="metrics key used as the entropy H (default auto: entropy/generated when every run logs it, "
        "the entropy of all generated responses before dynamic filtering; else entropy)",
    )
    mc.set_defaults(func=run)


def run(args) -> int:
    from harness.run.rundir import check_output_place
    from harness.studies.mechanism import write_mechanism

    if not Path(args.runs_dir).is_dir():
        raise FileNotFoundError(f"no such runs directory: {args.runs_dir}")
    check_output_place(args.out, "--out")
    family = None if args.law_family is None else tuple(x.strip() for x in args.law_family.split(",") if x.strip())
    if family is not None and not family:
        raise ValueError("--law-family: give at least one method, e.g. grpo,rloo,prime")
    from harness.results.archive import archives

    if not archives(args.runs_dir):  # a folder of run archives is read (and warned about) inside write_mechanism
        collect_runs([args.runs_dir])  # the files it cannot read are named here
    for p in write_mechanism(
        args.runs_dir, args.out, args.score_key, args.baseline, image_formats(args.formats), family, args.entropy_key
    ):
        print(p)
    return 0
