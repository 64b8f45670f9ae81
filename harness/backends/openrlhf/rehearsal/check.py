"""The CPU rehearsal's two checks around the sweep (``scripts/ci_rehearsal.sh``).

``interrupt``: start ``harness sweep SPEC --only CELL`` in its own session and SIGKILL every process of the cell
(the sweep, the cell's job in its own session, the launcher, Ray, and Ray's workers, which Ray starts in sessions
of their own: found by the run directory in their environment) once the cell has written the checkpoint and the
metrics row of step ``--after-step``: what a pre-empted or crashed job leaves behind. Nothing may survive.

``verify``: every cell of the sweep finished ``completed`` with one metrics row per step, an ``eval/step_N.json`` at
every in-loop eval step, the after-training results attached, ``checkpoints/final``, never more checkpoint copies
than the retention keeps (``checkpoints/openrlhf/retention.jsonl``, the peak after each save); the interrupted
cell resumed from its DeepSpeed checkpoint (upstream's ``--ckpt.load_enable``: "Loading the checkpoint",
``checkpoint_states`` with the step) and trained only the remaining steps; the leaderboard has a scored row per
method. Writes a JSON summary (``--out``); any failure is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.io import jsonl_lines, read_jsonl


def _cells(spec_path: str, runs_dir: str) -> dict:
    import harness.sweeps as sweeps  # the one upward import (tests/foundation/test_import_graph.py)

    return {c.alias: (c, sweeps.cell_dir(Path(runs_dir), c)) for c in sweeps.expand(sweeps.load_spec(spec_path))}


def _checkpoint_step(run_dir: Path) -> int:
    latest = run_dir / "checkpoints" / "openrlhf" / "_actor" / "latest"
    try:
        return int(latest.read_text().strip().removeprefix("global_step"))
    except (OSError, ValueError):
        return 0


def _saved_step(run_dir: Path) -> int:
    """The last step whose save finished with its HF copy (retention.jsonl); the DeepSpeed checkpoint's step when the
    run writes no HF copies."""
    from harness.backends.openrlhf import retention

    rows = read_jsonl(run_dir / "checkpoints" / "openrlhf" / retention.LOG_FILE)
    if rows:
        return int(rows[-1]["step"])
    from harness.io import load_yaml, read_text

    config = load_yaml(read_text(run_dir / "config.yaml")) if (run_dir / "config.yaml").exists() else {}
    return _checkpoint_step(run_dir) if (config.get("openrlhf") or {}).get("keep_hf_checkpoints") == 0 else 0


def _logged_steps(run_dir: Path) -> list[int]:
    return [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")]  # a live file: a torn last line is skipped


def run_processes(run_dir: Path) -> list[int]:
    """Live processes started for ``run_dir`` in any session: the plug-in config every launcher and Ray worker of
    the run carries in its environment names the run directory (Ray starts workers in sessions of their own, and
    a rollout worker can outlive a killed raylet)."""
    needle = f'"run_dir": {json.dumps(os.path.abspath(os.fspath(run_dir)))}'.encode()  # as flags.build_plan
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":  # zombies hold nothing and are not ours to reap
            out.append(int(entry.name))
    return out


def _group_alive(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True).stdout.split("\n")
    return [int(p) for p, g in (line.split() for line in out if line.strip()) if int(g) == pgid]


def kill_after_step(
    cmd: list[str], run_dir: Path, after_step: int, log_path: Path, more_groups=lambda: [], timeout_s: float = 900.0
) -> dict:
    """Run ``cmd`` (which trains ``run_dir``) in its own session and SIGKILL its whole process group, and the groups
    ``more_groups()`` names (a local sweep job's own session), once ``run_dir`` holds the checkpoint and the
    metrics row of step ``after_step``; checks that nothing of those groups survived."""
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while time.time() - t0 < timeout_s:
        if _saved_step(run_dir) >= after_step and after_step in _logged_steps(run_dir):  # the whole save done
            break
        if proc.poll() is not None:
            raise SystemExit(f"error: {run_dir} ended (exit {proc.returncode}) before step {after_step}'s checkpoint")
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"error: {run_dir} did not reach step {after_step}'s checkpoint in {timeout_s:.0f} s")
    step = _checkpoint_step(run_dir)
    groups = [*more_groups(), proc.pid]
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in run_processes(run_dir):  # the run's Ray workers, in sessions of their own
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.time() + 30
    while (any(_group_alive(g) for g in groups) or run_processes(run_dir)) and time.time() < deadline:
        time.sleep(0.5)
    left = [p for g in groups for p in _group_alive(g)] + run_processes(run_dir)
    if left:
        raise SystemExit(f"error: processes {left} of the killed run survived the SIGKILL")
    time.sleep(2)  # nothing may write a result after the kill
    if (run_dir / "result.json").exists():
        raise SystemExit(f"error: {run_dir} has a result.json after the kill; nothing was interrupted")
    return {
        "run_dir": str(run_dir),
        "killed_at_checkpoint_step": step,
        "logged_steps_before_kill": _logged_steps(run_dir),
        "seconds_to_kill": round(time.time() - t0, 1),
    }


def interrupt(spec: str, runs_dir: str, cell: str, after_step: int, log_path: Path) -> dict:
    """Run one cell through ``harness sweep --only`` and kill it with all its processes after ``after_step``."""
    cells = _cells(spec, runs_dir)
    if cell not in cells:
        raise SystemExit(f"error: --cell {cell!r} is not a cell of {spec}; cells: {', '.join(cells)}")
    run_dir = cells[cell][1]
    cmd = [sys.executable, "-m", "harness", "sweep", spec, "--runs-dir", runs_dir, "--only", cell, "--no-progress"]

    def job_groups():  # the local executor starts each cell's job controller in a session of its own
        jobs = read_jsonl(run_dir / "jobs.jsonl")
        return [os.getpgid(int(j["job_id"])) for j in jobs if j.get("executor") == "local" and _alive(j["job_id"])]

    return {"cell": cell, **kill_after_step(cmd, run_dir, after_step, log_path, more_groups=job_groups)}


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (ProcessLookupError, ValueError):
        return False


def _fail(msg: str) -> None:
    raise AssertionError(msg)


def check_cell(run_dir: Path, cfg, resumed_from: int | None = None) -> dict:
    """One finished rehearsal cell (``cfg``: its RunConfig); returns its summary or raises AssertionError."""
    result = json.loads((run_dir / "result.json").read_text())
    if result["status"] != "completed":
        _fail(f"{run_dir}: status {result['status']} ({result.get('error', '')[:200]})")
    steps = cfg.train.steps
    logged = _logged_steps(run_dir)
    if logged != list(range(1, steps + 1)):
        _fail(f"{run_dir}: metrics.jsonl steps {logged}, expected 1..{steps} once each")
    rows = [row for _, row in jsonl_lines(run_dir / "metrics.jsonl")]
    for key in ("reward/mean", "entropy", "cov/term", "clipfrac", "ppo_kl"):
        if any(key not in r for r in rows):
            _fail(f"{run_dir}: metrics.jsonl rows without {key!r}")
    every = cfg.eval.every
    want = list(range(every, steps + 1, every))
    have = sorted(int(p.stem.split("_")[1]) for p in (run_dir / "eval").glob("step_*.json"))
    if [s for s in have if s != resumed_from] != [s for s in want if s != resumed_from]:  # killed during that eval?
        _fail(f"{run_dir}: in-loop evals at steps {have}, expected {want}")
    suites = (result.get("eval") or {}).get("suites") or {}
    missing = [s for s in cfg.eval.suites if suites.get(s, {}).get("stage") != "after_training"]
    if missing:
        _fail(f"{run_dir}: no after-training result for {missing}")
    if not (run_dir / "checkpoints" / "final" / "config.json").is_file():
        _fail(f"{run_dir}: no checkpoints/final")
    kept = check_retention(run_dir, cfg)
    log = (run_dir / "openrlhf.log").read_text(errors="replace")
    out = {
        "status": result["status"],
        "steps": logged,
        "in_loop_evals": have,
        "reward": [r["reward/mean"] for r in rows],
        "after_training": {s: suites[s]["metrics"][suites[s]["primary"]] for s in cfg.eval.suites},
        "wall_time_s": result.get("wall_time_s"),
        "checkpoints": kept,
    }
    if cfg.method.get("rollout_correction", "off") != "off":
        out["rollout_correction"] = check_correction(run_dir, rows)
    out.update(_check_batches(run_dir, cfg, rows))
    if resumed_from is not None:
        if "Loading the checkpoint" not in log or f"'global_step': {resumed_from}" not in log:
            _fail(f"{run_dir}: the log shows no resume from global_step{resumed_from} (--ckpt.load_enable)")
        launches = log.count("harness: launching OpenRLHF for")
        if launches != 2:
            _fail(f"{run_dir}: {launches} launches in openrlhf.log, expected 2 (killed, resumed)")
        after = log.split("Loading the checkpoint", 1)[1]
        trained = sorted({int(s) for s in _global_steps(after)})
        if trained != list(range(resumed_from + 1, steps + 1)):
            _fail(f"{run_dir}: after the resume upstream trained steps {trained}, expected {resumed_from + 1}..{steps}")
        out["resumed_from_step"] = resumed_from
        out["steps_trained_after_resume"] = trained
    return out


CORRECTION_KEYS = ("rollout_correction/filtered_frac", "rollout_correction/log_ratio_abs", "openrlhf/is_filter_ratio")


def check_correction(run_dir: Path, rows: list[dict]) -> dict:
    """A cell with the method's rollout_correction on: the engine's log-probs reached the loss (the mean |log
    pi_train - log pi_rollout| is above 0: the CPU engine's float32 forward vs the bf16 policy's) and our filter
    fraction is upstream's is_filter_ratio of the same step."""
    for r in rows:
        missing = [k for k in CORRECTION_KEYS if k not in r]
        if missing:
            _fail(f"{run_dir}: step {r['step']} has no {missing} (the correction did not run)")
        if not r["rollout_correction/log_ratio_abs"] > 0:
            _fail(f"{run_dir}: step {r['step']}: rollout log-probs equal the trainer's (did vLLM's arrive?)")
        if abs(r["rollout_correction/filtered_frac"] - r["openrlhf/is_filter_ratio"]) > 1e-6:
            _fail(f"{run_dir}: step {r['step']}: filtered_frac differs from upstream's is_filter_ratio")
    keys = (*CORRECTION_KEYS[:2], "rollout_correction/kl", "rollout_correction/coef_mean")
    return {k: [r.get(k) for r in rows] for k in keys}


def _check_batches(run_dir: Path, cfg, rows: list[dict]) -> dict:
    """Packed forwards pad nothing (``batch/pad_frac`` 0), dynamic micro-batches stay within the token budget (or one
    sequence), and dynamic filtering logged its generation batches within ``train.max_gen_batches``."""
    from harness.backends.openrlhf.options import options_of

    opts, train = options_of(cfg), cfg.train
    out = {"pad_frac": [r.get("batch/pad_frac") for r in rows], "batch_tokens": [r.get("batch/tokens") for r in rows]}
    if opts.packing_samples and any(r.get("batch/pad_frac") != 0.0 for r in rows):
        _fail(f"{run_dir}: packed micro-batches with padding: batch/pad_frac {out['pad_frac']}")
    if opts.max_tokens_per_gpu is not None:
        bound = max(opts.max_tokens_per_gpu, opts.max_prompt_len + train.max_new_tokens)
        if any(r.get("batch/tokens") is None or r["batch/tokens"] > bound for r in rows):
            _fail(f"{run_dir}: batch/tokens {out['batch_tokens']} not within the dynamic budget {bound}")
    if train.dynamic_filtering:
        out["gen_batches"] = [r.get("rollout/batches") for r in rows]
        out["gen_cap_hits"] = sum(r.get("filter/gen_cap_hit", 0.0) for r in rows)
        if any(b is None or b > train.max_gen_batches for b in out["gen_batches"]):
            _fail(f"{run_dir}: rollout/batches {out['gen_batches']} beyond train.max_gen_batches")
    return out


def check_retention(run_dir: Path, cfg) -> dict:
    """No save ever left more checkpoint copies than the retention keeps: every line of retention.jsonl (what was on
    disk right after a save, the peak) holds at most ``retention.peak(keep_hf_checkpoints)`` HF copies and
    ``keep_checkpoints`` DeepSpeed ones; at the end exactly the newest saves are left, the last step's among them."""
    from harness.backends.openrlhf import diskplan, retention
    from harness.backends.openrlhf.options import options_of

    opts = options_of(cfg)
    ckpt = run_dir / "checkpoints" / "openrlhf"
    steps, every = cfg.train.steps, cfg.train.checkpoint_every
    saved = [s for s in range(1, steps + 1) if every > 0 and (s % every == 0 or s == steps)]
    assert len(saved) == diskplan.saves(steps, every)
    rows = read_jsonl(ckpt / retention.LOG_FILE)
    hf_peak, ds_peak = retention.peak(opts.keep_hf_checkpoints), opts.keep_checkpoints
    for row in rows:
        if row["step"] not in saved or len(row["hf"]) > hf_peak or len(row["deepspeed"]) > ds_peak:
            _fail(
                f"{run_dir}: after the save of step {row['step']}: {row['hf']} and {row['deepspeed']} (keep "
                f"{opts.keep_hf_checkpoints} HF, at most {hf_peak} at once; {ds_peak} DeepSpeed)"
            )
    hf = [p.name for p in retention.copies(ckpt)]
    ds = [p.name for p in retention.copies(ckpt / "_actor", retention.DS_COPY)]
    want = [f"global_step{s}_hf" for s in saved[-opts.keep_hf_checkpoints :]] if opts.keep_hf_checkpoints else []
    if hf != want or ds != [f"global_step{s}" for s in saved[-ds_peak:]]:
        _fail(f"{run_dir}: at the end {hf} and {ds}; expected {want} and the newest {ds_peak} DeepSpeed checkpoints")
    return {"saves": saved, "peak_hf": max((len(r["hf"]) for r in rows), default=0), "hf": hf, "deepspeed": ds}


def _global_steps(log: str) -> list[str]:
    import re

    return re.findall(r"Global step (\d+):", log)


def check_leaderboard(path: Path, methods: list[str]) -> None:
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    import re

    for m in methods:
        row = next((r for r in rows if [c.strip() for c in r.split("|")][2:3] == [m]), None)
        if row is None:
            _fail(f"{path}: no row for method {m}")
        if not re.search(r"\| \d+\.\d( ± [\d.]+)? \(n=\d+", row):  # e.g. "| 87.5 ± 52.9 (n=2)"
            _fail(f"{path}: the row of {m} has no scores: {row}")


def verify(spec: str, runs_dir: str, leaderboard: str, resumed: dict | None) -> dict:
    from harness.run.config import load_config

    summary = {"cells": {}, "resumed": resumed}
    methods = []
    for alias, (_cell, run_dir) in _cells(spec, runs_dir).items():
        cfg = load_config(run_dir / "config.yaml")
        at = resumed["killed_at_checkpoint_step"] if resumed and resumed["cell"] == alias else None
        summary["cells"][alias] = check_cell(run_dir, cfg, resumed_from=at)
        if cfg.method_name not in methods:
            methods.append(cfg.method_name)
    check_leaderboard(Path(leaderboard), methods)
    summary["leaderboard"] = leaderboard
    summary["methods"] = methods
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.backends.openrlhf.rehearsal.check", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("interrupt")
    a.add_argument("--spec", required=True)
    a.add_argument("--runs-dir", required=True)
    a.add_argument("--cell", required=True)
    a.add_argument("--after-step", type=int, default=2)
    a.add_argument("--out", required=True, help="JSON of what was killed (read by verify --resumed)")
    a.add_argument("--log", help="the killed sweep's output (default: OUT.log)")
    v = sub.add_parser("verify")
    v.add_argument("--spec", required=True)
    v.add_argument("--runs-dir", required=True)
    v.add_argument("--leaderboard", required=True)
    v.add_argument("--resumed", help="the JSON interrupt wrote")
    v.add_argument("--out", required=True, help="JSON summary of every cell")
    args = p.parse_args(argv)
    if args.cmd == "interrupt":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        out = interrupt(args.spec, args.runs_dir, args.cell, args.after_step, Path(args.log or args.out + ".log"))
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        print(f"interrupted {out['cell']} after step {out['killed_at_checkpoint_step']}'s checkpoint")
        return 0
    resumed = json.loads(Path(args.resumed).read_text()) if args.resumed else None
    try:
        summary = verify(args.spec, args.runs_dir, args.leaderboard, resumed)
    except (AssertionError, FileNotFoundError, KeyError) as e:
        print(f"error: rehearsal check failed: {e}", file=sys.stderr)
        return 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"rehearsal verified: {len(summary['cells'])} cells, methods {', '.join(summary['methods'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
