"""Benchmark: expand, materialise and submit a 200-cell sweep to the local SLURM cluster as job arrays.

    scripts/slurm/cluster.sh up /tmp/slurm && eval "$(scripts/slurm/cluster.sh env /tmp/slurm)"
    .venv/bin/python benchmarks/bench_sweep.py [--cells 200] [--runs-dir DIR]

Without a running cluster (SLURM_CONF unset) it starts one in a temporary directory (root + the Debian
packages, see scripts/ci_slurm.sh) and stops it afterwards. The spec is real: pocket run configs validated
by harness.run.config.load_config (7 methods x 2 model sizes x seeds), two resource groups -> two sbatch arrays.
Jobs are submitted held (`--hold`) and cancelled afterwards, so only the submission is measured.
Target: <= 10 s for 200 cells.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.sweeps import cells as C  # noqa: E402
from harness.sweeps import expand, load_spec  # noqa: E402
from harness.sweeps.submit import submit_cells  # noqa: E402

METHODS = [
    {"name": "grpo"},
    {"name": "rloo"},
    {"name": "clip_higher"},
    {"name": "entropy_bonus", "coef": 0.001},
    {"name": "clip_cov"},
    {"name": "kl_cov", "k_ratio": 0.002},
    {"name": "prime"},
]


def spec_for(n_cells: int) -> dict:
    per_seed = len(METHODS) * 2
    seeds = max(1, -(-n_cells // per_seed))
    return {
        "name": "bench",
        "base": {
            "backend": "pocket",
            "method": {"name": "grpo"},
            "model": {"name": "pocket-0.3m"},
            "task": {"name": "arith"},
            "train": {"steps": 60},
        },
        "grid": {"method": METHODS},
        "zip": [{"model.name": ["pocket-0.3m", "pocket-1m"], "train.lr": [1e-3, 5e-4]}],
        "seeds": list(range(seeds)),
        "resources": {
            "default": {
                "partition": "debug",
                "timeout_min": 30,
                "array_parallelism": 16,
                "additional_parameters": {"hold": True},
            },
            "groups": [{"match": {"model.name": "pocket-1m"}, "timeout_min": 60}],
        },
    }


def run(n_cells: int, runs_dir: Path) -> dict:
    t0 = time.perf_counter()
    spec = load_spec(spec_for(n_cells))
    cells = expand(spec)[:n_cells]
    t1 = time.perf_counter()
    for c in cells:
        C.materialise(c, runs_dir, spec.name)
    t2 = time.perf_counter()
    report = submit_cells(cells, runs_dir, "slurm", sweep=spec.name, progress=False, log=lambda s: None)
    t3 = time.perf_counter()
    arrays = sorted({j.split("_")[0] for j in report.job_ids.values()})
    subprocess.run(["scancel", *arrays], check=False)
    return {
        "cells": len(cells),
        "arrays": len(arrays),
        "refused": len(report.refused),
        "expand_validate_s": t1 - t0,
        "materialise_s": t2 - t1,
        "submit_s": t3 - t2,
        "total_s": t3 - t0,
    }


def _cluster_answers() -> bool:
    return bool(os.environ.get("SLURM_CONF")) and subprocess.run(["sinfo"], capture_output=True).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--runs-dir", type=Path, help="default: a temporary directory, removed afterwards")
    args = ap.parse_args()
    cluster = None
    if not _cluster_answers():
        cluster = tempfile.mkdtemp(prefix="bench-slurm-")
        subprocess.run([str(REPO / "scripts/slurm/cluster.sh"), "up", cluster], check=True)
        os.environ["SLURM_CONF"] = f"{cluster}/slurm.conf"
        os.environ["PATH"] = f"{cluster}/bin:/usr/sbin:/sbin:{os.environ['PATH']}"
    runs = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        r = run(args.cells, runs)
    finally:
        if args.runs_dir is None:
            shutil.rmtree(runs, ignore_errors=True)
        if cluster:
            subprocess.run([str(REPO / "scripts/slurm/cluster.sh"), "down", cluster])
            shutil.rmtree(cluster, ignore_errors=True)
    print(f"{r['cells']} cells -> {r['arrays']} sbatch arrays ({r['refused']} refused)")
    for k in ("expand_validate_s", "materialise_s", "submit_s", "total_s"):
        print(f"  {k:18} {r[k]:6.2f}")
    ok = r["total_s"] <= 10 and r["refused"] == 0
    print("target <= 10 s:", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
