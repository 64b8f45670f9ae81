"""``harness doctor [--cpu] [--json FILE] [--spec SPEC] [--need-gb N] [--path DIR] [--slurm [--partitions P,...]]``:
can this node (or one node of each SLURM partition) run the cells? One line per check, a JSON report, exit 1 on a
failure (harness/devicecheck/doctor.py)."""

from __future__ import annotations

import argparse
import sys

ORDER = 46


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check a node for what a cell needs: GPUs, CUDA toolkit, flash-attn, NCCL, ray, disk, staged inputs",
        description="Check this node (or, with --slurm, one node of each partition) for what a cell needs: GPUs "
        "and their memory, CUDA and the toolkit DeepSpeed's JIT ops compile with, flash-attn and vLLM, NCCL, "
        "the OpenRLHF stack, `ray` on PATH, free disk, and the spec's staged inputs. One line per check (ok, "
        "FAIL, or skipped with the reason); exit 1 when a check fails.",
    )
    p.add_argument("--cpu", action="store_true", help="run only the checks that need no GPU (GPU checks: skipped)")
    p.add_argument("--json", metavar="FILE", help="write the report here (with --slurm: every partition's)")
    p.add_argument("--spec", help="a sweep spec: check for what its cells need (default: the whole GPU path)")
    p.add_argument("--need-gb", type=float, metavar="N", help="free disk (GiB) the runs need where they go (--path)")
    p.add_argument(
        "--path", metavar="DIR", help="where the runs go, for the disk check (default: runs/<spec name>, else here)"
    )
    p.add_argument("--online", action="store_true", help="the compute nodes reach the hub (staging not required)")
    p.add_argument("--slurm", action="store_true", help="run the doctor as a one-node job on each SLURM partition")
    p.add_argument(
        "--partitions", metavar="P,...", help="with --slurm: these partitions only (comma-separated; default: all)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.devicecheck.doctor import FAIL, needs_of, report, run_checks

    if args.need_gb is not None and args.need_gb < 0:
        raise ValueError(f"--need-gb {args.need_gb}: must be >= 0")
    if args.partitions and not args.slurm:
        raise ValueError("--partitions: only with --slurm")
    argv = sys.argv[1:]
    if args.slurm:
        return _slurm(args, argv)
    needs = needs_of(args.spec, args.online)  # a bad spec is refused here, before any check runs
    checks = run_checks(args.cpu, needs, args.path, args.need_gb, log=print)
    doc = report(checks, args.cpu, needs, argv)
    failed = doc["summary"][FAIL]
    print(f"{len(failed)} failed: {', '.join(failed)}" if failed else "no check failed")
    _write(args.json, doc)
    return 1 if failed else 0


def _slurm(args, argv) -> int:
    import shutil

    from harness.devicecheck.doctor_slurm import failed, run_on_partitions

    if shutil.which("sbatch") is None:
        raise ValueError("--slurm: sbatch is not on PATH (no SLURM client here); run on a login node")
    if args.spec:
        from harness.devicecheck.doctor import needs_of

        needs_of(args.spec, args.online)  # refused here rather than in every job
    options = {k: getattr(args, k) for k in ("cpu", "spec", "path", "need_gb", "online")} | {"argv": argv}
    partitions = [p.strip() for p in args.partitions.split(",") if p.strip()] if args.partitions else None
    reports = run_on_partitions(options, partitions)
    for p, doc in reports.items():
        if "error" in doc:
            print(f"[{p}] FAIL    job     {doc['error']}")
            continue
        for c in doc["checks"]:
            print(f"[{p}] {c['status']:8s}{c['name']:14s}{c['detail']}")
    bad = failed(reports)
    print("a check failed" if bad else f"no check failed on {len(reports)} partition(s)")
    _write(args.json, {"partitions": reports})
    return 1 if bad else 0


def _write(path, doc) -> None:
    if path:
        from harness.io import atomic_write_json

        atomic_write_json(path, doc)
        print(f"report: {path}")
