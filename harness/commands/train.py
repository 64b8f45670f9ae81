"""``harness train CONFIG.yaml [key=value ...] [--run-dir DIR] [--force] [--dry-run] [--eval-only]``: one run (or only
the after-training evaluation of a finished one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = 20


def default_run_dir(cfg) -> Path:
    label = cfg.name or f"{cfg.method_name}-{Path(cfg.model.name).name}-{Path(cfg.task.name).stem}-s{cfg.seed}"
    return Path("runs") / f"{label}-{cfg.run_id()[:6]}"


def run(args) -> int:
    from harness.run.config import load_config
    from harness.run.runner import run as train_run

    cfg = load_config(args.config, overrides=args.overrides)  # validates everything before any work
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(cfg)
    from harness.run.rundir import check_placement

    check_placement(run_dir, "cell" if (run_dir / "cell.json").is_file() else "run")  # --dry-run refuses it too
    if args.dry_run:
        from harness.backends import get_backend
        from harness.run.after_training import describe as describe_eval

        if run_dir.is_dir():  # what the run directory holds is checked in a dry run too (reads only)
            from harness.run.runner import check_run_dir

            check_run_dir(cfg, run_dir, args.force, get_backend(cfg.backend))

        print(cfg.to_yaml(), end="")
        print(f"# run id {cfg.run_id()} -> {run_dir}")
        print(get_backend(cfg.backend).launch_command(cfg, run_dir))
        print(f"# {describe_eval(cfg)}")
        return 0
    from harness.run.runner import FINISHED

    if args.eval_only:
        from harness.run.retry_eval import retry

        result = retry(cfg, run_dir)
    else:
        result = train_run(cfg, run_dir, force=args.force)
    if result.get("status") not in FINISHED:
        return 1
    summary = {k: result.get(k) for k in ("run_id", "status", "method", "model", "steps", "updates", "wall_time_s")}
    summary.update(result.get("summary", {}))
    for suite, res in (result.get("eval") or {}).get("suites", {}).items():
        summary[f"eval/{suite}"] = res.get("metrics")
    print(json.dumps(summary, indent=1, default=str))
    print(f"run directory: {run_dir}", file=sys.stderr)
    if result.get("eval_status") == "failed":  # training finished; the after-training evaluation did not
        print(
            f"error: evaluation failed: {result.get('eval_error')}; retry only it: {result.get('eval_retry')}",
            file=sys.stderr,
        )
        return 1
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train one run from a run config (YAML)",
        description="Train one run into a run directory: config.yaml, metrics.jsonl, eval/, "
        "checkpoints/, result.json (written last). A rerun resumes from the checkpoint.",
    )
    p.add_argument("config", help="run config YAML (see docs/pocket.md)")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="override config keys, e.g. train.steps=5 method.name=kl_cov"
    )
    p.add_argument("--run-dir", help="run directory (default: runs/<method>-<model>-<task>-s<seed>-<id>)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a run dir holding a different config (old files moved to replaced/)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="validate and print the resolved config and launch command; run nothing"
    )
    p.add_argument(
        "--eval-only",
        action="store_true",
        help="retry only the after-training evaluation of a run that finished training (result.json's eval_retry)",
    )
    p.set_defaults(func=run)
