"""Seeds per hour: population training (harness/backends/pocket/population.py) vs one process per seed.

The same N runs (the quickstart's GRPO settings, sweeps/configs/pocket_countdown.yaml, seeds 0..N-1, fewer steps)
trained by two kinds of jobs, two jobs at a time on this machine (the local sweep executor's default on 2 cores):
  separate    N processes ``harness train CONFIG --run-dir DIR``: one seed per process (imports, set-up, training)
  pop<M>      N/M processes, each ``run_population`` over M seeds (harness/backends/pocket/population_runner.py)
Seeds per hour = N / wall time; CPU = the children's user+system time. Each arm's ratio is against the
separate arm of the same round; arms alternate order between rounds; every arm runs fresh processes into
fresh run directories. Warm starts (cached per seed) are made once before any arm and are not timed; every arm
loads them from the cache. The machine's load average is printed before each arm: other jobs share the CPUs.

    python benchmarks/bench_population.py [--sizes pocket-0.1m pocket-0.3m pocket-1m] [--seeds 16]
                                          [--members 4 8 16] [--steps 10] [--rounds 1] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "sweeps" / "configs" / "pocket_countdown.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
POPULATION = """
import json, sys
from pathlib import Path
from harness.backends.pocket.population_runner import run_population
from harness.run.config import load_config
spec = json.loads(Path(sys.argv[1]).read_text())
out = run_population([load_config(c) for c in spec["configs"]], [Path(d) for d in spec["dirs"]], quiet=True)
bad = [r for r in out if not isinstance(r, dict) or r.get("status") not in ("completed", "insufficient_updates")]
sys.exit(1 if bad else 0)
"""


def configs(size: str, seeds: int, steps: int, cache: Path) -> list[dict]:
    from harness.run.config import load_config

    return [
        load_config(
            str(BASE),
            overrides=[
                f"seed={s}",
                f"model.name={size}",
                f"model.cache_dir={cache}",
                f"train.steps={steps}",
                f"eval.every={max(1, steps // 2)}",
                "train.checkpoint_every=0",
                "logging.progress=false",
            ],
        ).to_dict()
        for s in range(seeds)
    ]


def run_jobs(commands: list[list[str]], parallel: int) -> tuple[float, float]:
    """Run the commands ``parallel`` at a time; (wall s, children's CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    queue, running = list(commands), []
    while queue or running:
        while queue and len(running) < parallel:
            running.append(
                subprocess.Popen(queue.pop(0), env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        time.sleep(0.05)
        for p in [p for p in running if p.poll() is not None]:
            running.remove(p)
            if p.returncode != 0:
                raise SystemExit(f"error: a benchmark job failed ({p.args[:4]}...): exit {p.returncode}")
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def separate_commands(cfgs: list[dict], work: Path) -> list[list[str]]:
    import yaml

    out = []
    for k, c in enumerate(cfgs):
        path = work / f"config{k}.yaml"
        path.write_text(yaml.safe_dump(c))
        out.append([sys.executable, "-m", "harness", "train", str(path), "--run-dir", str(work / f"run{k}")])
    return out


def population_commands(cfgs: list[dict], members: int, work: Path) -> list[list[str]]:
    out = []
    for a in range(0, len(cfgs), members):
        spec = work / f"population{a}.json"
        dirs = [str(work / f"run{k}") for k in range(a, min(a + members, len(cfgs)))]
        spec.write_text(json.dumps({"configs": cfgs[a : a + members], "dirs": dirs}))
        out.append([sys.executable, "-c", POPULATION, str(spec)])
    return out


def warm_up(cfgs: list[dict], work: Path) -> None:
    """Make every seed's warm start (cached; not timed): two population jobs of one step."""
    short = [dict(c, train=dict(c["train"], steps=1), eval=dict(c["eval"], every=0)) for c in cfgs]
    run_jobs(population_commands(short, -(-len(short) // 2), work), 2)


def bench_size(size: str, args, cache: Path) -> list[dict]:
    cfgs = configs(size, args.seeds, args.steps, cache)
    with tempfile.TemporaryDirectory() as tmp:
        warm_up(cfgs, Path(tmp))
    arms = ["separate"] + [f"pop{m}" for m in args.members]
    rows = []
    for r in range(args.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        measured = {}
        for arm in order:
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                if arm == "separate":
                    cmds = separate_commands(cfgs, work)
                else:
                    cmds = population_commands(cfgs, int(arm[3:]), work)
                wall, cpu = run_jobs(cmds, args.parallel)
            measured[arm] = {"wall": wall, "cpu": cpu, "load": load, "jobs": len(cmds)}
            print(
                f"  {size} round {r + 1} {arm}: {len(cmds)} jobs, wall {wall:.1f} s, CPU {cpu:.1f} s, load {load:.1f}"
            )
        for arm in arms:
            m = measured[arm]
            rows.append(
                {
                    "size": size,
                    "round": r + 1,
                    "arm": arm,
                    **m,
                    "seeds_per_hour": args.seeds / m["wall"] * 3600,
                    "wall_ratio": measured["separate"]["wall"] / m["wall"],
                    "cpu_ratio": measured["separate"]["cpu"] / m["cpu"],
                }
            )
    return rows


def table(rows: list[dict], args) -> str:
    lines = [
        "| model | arm | jobs | wall s | CPU s | seeds/hour | × separate (wall) | × separate (CPU) | load avg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = []
    for r in rows:
        if (r["size"], r["arm"]) not in keys:
            keys.append((r["size"], r["arm"]))
    for size, arm in keys:
        rs = [r for r in rows if r["size"] == size and r["arm"] == arm]
        med = {
            k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "seeds_per_hour", "wall_ratio", "cpu_ratio")
        }
        span = (
            f" ({min(r['wall_ratio'] for r in rs):.2f}–{max(r['wall_ratio'] for r in rs):.2f})" if len(rs) > 1 else ""
        )
        loads = "/".join(f"{r['load']:.1f}" for r in rs)
        lines.append(
            f"| {size} | {arm} | {rs[0]['jobs']} | {med['wall']:.1f} | {med['cpu']:.1f} | "
            f"{med['seeds_per_hour']:.0f} | **{med['wall_ratio']:.2f}×**{span} | {med['cpu_ratio']:.2f}× | {loads} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["pocket-0.1m", "pocket-0.3m", "pocket-1m"])
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--members", nargs="+", type=int, default=[4, 8, 16])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--parallel", type=int, default=2, help="jobs at once (the local executor's slots)")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bench_population_cache")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    print(
        f"seeds per hour: {args.seeds} seeds x {args.steps} steps (quickstart GRPO settings), {args.parallel} jobs "
        f"at a time, {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start"
    )
    rows = []
    for size in args.sizes:
        rows += bench_size(size, args, args.cache)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
