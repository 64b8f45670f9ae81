"""Grading throughput: pooled math wrapper vs serial math-verify, and sandboxed programs per second.

    .venv/bin/python benchmarks/bench_evals.py [--items 400] [--programs 60] [--workers 2] [--json OUT]

Math items are generated (fractions vs decimals, expanded vs factored polynomials, radicals, wrong answers)
with random numbers so sympy's caches do not make later runs look faster; the pool runs first, then the
serial baseline (same items, same process, math-verify called directly in the main thread). Pool start-up
(forking the workers) is included in its time; importing math-verify is not (both sides pay it once).
On a shared machine wall-clock speedups are noisy, so CPU times are reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def math_items(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        kind = i % 6
        if kind == 0:
            items.append(
                (
                    f"\\boxed{{\\frac{{{a}}}{{{b}}}}}",
                    f"{a / b:.6f}" if rng.random() < 0.5 else f"\\frac{{{2 * a}}}{{{2 * b}}}",
                )
            )
        elif kind == 1:
            items.append((f"so \\boxed{{x^2+{2 * a}x+{a * a}}}", f"(x+{a})^2"))
        elif kind == 2:
            items.append((f"\\boxed{{{a}\\sqrt{{{b}}}}}", f"\\sqrt{{{a * a * b}}}"))
        elif kind == 3:
            items.append((f"\\boxed{{{a * 1000:,}}}", f"{a * 1000}"))
        elif kind == 4:
            items.append((f"\\boxed{{({a}, {b})}}", f"[{a}, {b}]"))
        else:
            items.append((f"\\boxed{{{a}}}", f"{b}"))
    return items


def bench_math(n: int, workers: int) -> dict:
    import resource

    import math_verify  # noqa: F401  (both sides need it: import outside the timings)

    from harness.evals.math_grader import grade_math, grade_math_many

    items = math_items(n)
    ch0, self0 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    pooled = grade_math_many(items, workers=workers, timeout_s=10)
    t_pool = time.perf_counter() - t0
    ch1, self1 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    serial = [grade_math(r, g).correct for r, g in items]
    t_serial = time.perf_counter() - t0 - t_pool
    self2 = resource.getrusage(resource.RUSAGE_SELF)
    assert [v["correct"] for v in pooled] == serial, "pool and serial verdicts differ"
    cpu = lambda a, b: (b.ru_utime + b.ru_stime) - (a.ru_utime + a.ru_stime)  # noqa: E731
    pool_cpu = cpu(ch0, ch1) + cpu(self0, self1)
    serial_cpu = cpu(self1, self2)
    return {
        "items": n,
        "workers": workers,
        "serial_s": round(t_serial, 2),
        "pool_s": round(t_pool, 2),
        "serial_items_per_s": round(n / t_serial, 1),
        "pool_items_per_s": round(n / t_pool, 1),
        "speedup": round(t_serial / t_pool, 2),
        "correct": sum(serial),
        "serial_cpu_s": round(serial_cpu, 2),
        "pool_cpu_s": round(pool_cpu, 2),
        # wall-clock speedup the pool would reach with `workers` idle cores: serial CPU / (pool CPU / workers)
        "speedup_if_cores_idle": round(serial_cpu / (pool_cpu / workers), 2),
    }


def bench_sandbox(n: int, workers: int) -> dict:
    from harness.evals.code_grader import grade_code_many
    from harness.evals.sandbox import Sandbox
    from harness.evals.suites import get_suite

    fx = Path(__file__).resolve().parents[1] / "evals" / "data" / "fixtures" / "humaneval_plus.jsonl"
    raw = [json.loads(line) for line in fx.read_text().splitlines()]
    rows = get_suite("humaneval_plus").load(fixtures=True)
    items = []
    for i in range(n):
        row, r = rows[i % len(rows)], raw[i % len(raw)]
        resp = r["canonical_solution"] if i % 4 else "    return None\n"  # 1 in 4 wrong
        items.append({**row, "response": resp})
    out = {}
    for w in sorted({1, workers}):
        sb = Sandbox(workers=w)
        t0 = time.perf_counter()
        verdicts = grade_code_many(items, sb)
        dt = time.perf_counter() - t0
        sb.close()
        out[f"workers={w}"] = {
            "programs": n,
            "seconds": round(dt, 2),
            "programs_per_s": round(n / dt, 1),
            "passed": sum(v["correct"] for v in verdicts),
        }
    out["isolation"] = sb.describe()
    return out


BATTERY = {
    "infinite loop": "while True: pass\n",
    "sleeping loop": "import time\nwhile True: time.sleep(1)\n",
    "memory bomb (8 GiB)": "x = bytearray(8 << 30)\n",
    "200 forks": "import os, time\nfor i in range(200):\n    if os.fork() == 0:\n        time.sleep(30); os._exit(0)\n",
    "write /var/tmp/x": "open('/var/tmp/x', 'w').write('x')\n",
    "write /tmp/x (private tmpfs)": "open('/tmp/x', 'w').write('x')\n",
    "read /etc/shadow": "open('/etc/shadow').read()\n",
    "read /root/.bashrc": "open('/root/.bashrc').read()\n",
    "network connect": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n",
    "kill parent, kill(-1)": (
        "import os\nfor p in (os.getppid(), -1):\n    try:\n        os.kill(p, 9)\n"
        "    except OSError:\n        pass\nraise SystemExit(3)\n"
    ),
    "huge output": "import sys\nwhile True: sys.stdout.write('x' * 65536)\n",
    "os._exit(0) before tests": "import os\nos._exit(0)\n",
    "sys.exit(0) before tests": "import sys\nsys.exit(0)\n",
    "64 MiB file": "open('big', 'wb').write(b'x' * (64 << 20))\n",
}


def battery_table() -> str:
    """Run the hostile programs one by one with the default limits; a markdown table of the outcomes."""
    from harness.evals.code_grader import classify
    from harness.evals.sandbox import Sandbox

    rows = ["| program | status | detail | wall (s) |", "|---|---|---|---|"]
    with Sandbox(workers=2) as sb:
        for name, code in BATTERY.items():
            t0 = time.perf_counter()
            v = classify(sb.run({"prog.py": code}, {"mode": "script"}), {})
            rows.append(f"| {name} | {v['status']} | {v['detail'][:70]} | {time.perf_counter() - t0:.2f} |")
        rows.append(f"\n{sb.describe()}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--programs", type=int, default=60)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--battery", action="store_true", help="only run the hostile-program battery table")
    args = ap.parse_args()
    if args.battery:
        print(battery_table())
        return 0
    res = {
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "math": bench_math(args.items, args.workers),
        "sandbox": bench_sandbox(args.programs, args.workers),
    }
    m = res["math"]
    print("| benchmark | setting | time (s) | throughput | speedup |\n|---|---|---|---|---|")
    print(
        f"| math grading, serial math-verify | {m['items']} items, 1 process | {m['serial_s']} | "
        f"{m['serial_items_per_s']} items/s | 1.00x |"
    )
    print(
        f"| math grading, pooled wrapper | {m['items']} items, {m['workers']} workers | {m['pool_s']} | "
        f"{m['pool_items_per_s']} items/s | {m['speedup']}x |"
    )
    for k, v in res["sandbox"].items():
        if k.startswith("workers"):
            print(
                f"| sandbox, HumanEval-like | {v['programs']} programs, {k} | {v['seconds']} | "
                f"{v['programs_per_s']} programs/s | |"
            )
    print(
        f"\nmath CPU time: serial {m['serial_cpu_s']} s, pool {m['pool_cpu_s']} s in total "
        f"(=> {m['speedup_if_cores_idle']}x with {m['workers']} idle cores)"
    )
    print(f"cpus={res['cpus']} load_avg_1m={res['load_avg_1m']}  {res['sandbox']['isolation']}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
