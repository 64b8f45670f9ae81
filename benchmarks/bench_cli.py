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
import time

COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "harness --help": [sys.executable, "-m", "harness", "--help"],
    "harness table --help": [sys.executable, "-m", "harness", "table", "--help"],
    "harness methods": [sys.executable, "-m", "harness", "methods"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} runs each, interleaved")
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(args.repeats):
        for name, cmd in COMMANDS.items():
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            times[name].append(time.perf_counter() - t)
    print(f"{'command':28s} {'min s':>7s} {'median s':>9s}")
    for name, ts in times.items():
        print(f"{name:28s} {min(ts):7.3f} {statistics.median(ts):9.3f}")


if __name__ == "__main__":
    main()
