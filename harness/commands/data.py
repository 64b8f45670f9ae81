"""``harness data prepare NAME --out DIR`` and ``harness data check FILE``: training data the reward can score."""

from __future__ import annotations

import json

ORDER = 40


def register(sub) -> None:
    p = sub.add_parser(
        "data",
        help="prepare training data (DAPO-Math-17k, Eurus-2-RL math) and check training files",
        description="Prepare a training set as the backends read it ({prompt, answer} JSONL + a manifest), or "
        "check an existing one. docs/data.md has the details.",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")

    pp = dsub.add_parser(
        "prepare",
        help="a source -> DIR/NAME.jsonl + DIR/NAME.manifest.json",
        description="Read a source (the hub at its pinned revision, the shipped sample, or a local file in the "
        "hub schema), put each problem in the paper's \\boxed{} prompt, normalise the answer for the grader, drop "
        "duplicates and ungradable answers (counted in the manifest), check the result and write it atomically.",
    )
    pp.add_argument("name", help="source: dapo-math-17k | eurus-2-rl-math (harness data sources)")
    pp.add_argument("--out", required=True, help="folder for NAME.jsonl and NAME.manifest.json")
    pp.add_argument(
        "--source",
        default="hub",
        help="hub (default: datasets.load_dataset at the pinned revision), sample (the shipped sample), or a "
        ".parquet/.jsonl file in the source's hub schema",
    )
    pp.add_argument("--revision", help="hub commit/tag to load instead of the pinned one (recorded for a file)")
    pp.add_argument("--template", default="paper", help="paper (default), qwen_boxed, or a text holding {problem}")
    pp.add_argument("--force", action="store_true", help="replace an existing NAME.jsonl with other content")
    pp.add_argument("--workers", type=int, default=None, help="processes for the answer checks (default: CPUs)")
    pp.set_defaults(func=run_prepare)

    pc = dsub.add_parser(
        "check",
        help="refuse a training JSONL the reward cannot score",
        description="Every prompt must ask for the answer in \\boxed{} (and no other format); a seeded sample of "
        "gold answers must verify against themselves with the grader. Exit 2 with one line otherwise.",
    )
    pc.add_argument("file", help="JSONL of {prompt, answer} rows")
    pc.add_argument("--input-key", default="prompt")
    pc.add_argument("--label-key", default="answer")
    pc.add_argument("--sample", type=int, default=256, help="gold answers checked (0: all)")
    pc.add_argument("--seed", type=int, default=0)
    pc.set_defaults(func=run_check)

    ps = dsub.add_parser("sources", help="the known sources, their hub ids and pinned revisions")
    ps.set_defaults(func=run_sources)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_prepare(args) -> int:
    from harness.data import prepare

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    m = prepare(
        args.name,
        args.out,
        source=args.source,
        revision=args.revision,
        template=args.template,
        force=args.force,
        workers=args.workers,
        log=print,
    )
    print(json.dumps(m["counts"], indent=2))
    return 0


def run_check(args) -> int:
    from harness.data import check_training_file

    if args.sample < 0:
        raise ValueError(f"--sample must be >= 0, got {args.sample}")
    s = check_training_file(
        args.file, input_key=args.input_key, label_key=args.label_key, sample=args.sample, seed=args.seed
    )
    verified = f"{s.gold_checked} gold answers verified (seed {s.gold_seed})"
    print(f"{s.path}: ok: {s.rows} prompts ask for \\boxed{{}}; {verified}")
    return 0


def run_sources(args) -> int:
    from harness.data.sources import SOURCES

    for name in SOURCES.names():
        s = SOURCES.get(name)
        print(f"{name:<16} {s.hub_id} (split {s.split}) @ {s.revision}\n{'':<16} {s.description}")
    return 0
