"""CLI start-up: wall time of `harness --help` and other commands that do no work, min and median of repeated runs,
beside a bare `python -c pass` measured in the same run (the interpreter's own floor).

    python benchmarks/bench_cli.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def harness(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


COMMANDS = {  # "{tmp}": a fresh temporary folder
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "harness --help": harness("--help"),
    "harness table --help": harness("table", "--help"),
    "harness methods": harness("methods"),
    "harness methods kl_cov": harness("methods", "kl_cov"),
    "status quickstart (not run)": harness("status", "sweeps/quickstart.yaml", "--runs-dir", "{tmp}/none"),
    "sweep quickstart --dry-run": harness("sweep", "sweeps/quickstart.yaml", "--dry-run", "--runs-dir", "{tmp}/r"),
    "sweep paper_qwen25 --dry-run": harness("sweep", "sweeps/paper_qwen25.yaml", "--dry-run", "--runs-dir", "{tmp}/r"),
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} runs each, interleaved")
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, cmd in COMMANDS.items():
                t = time.perf_counter()
                subprocess.run([c.replace("{tmp}", tmp) for c in cmd], capture_output=True, check=True, cwd=ROOT)
                times[name].append(time.perf_counter() - t)
    print(f"{'command':28s} {'min s':>7s} {'median s':>9s}")
    for name, ts in times.items():
        print(f"{name:28s} {min(ts):7.3f} {statistics.median(ts):9.3f}")


if __name__ == "__main__":
    main()
