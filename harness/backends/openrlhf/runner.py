"""``train(config, run_dir)`` for the OpenRLHF backend: validate, then run the launch command as a subprocess.

The subprocess is exactly what ``launch_command`` prints (``harness.backends.openrlhf.launch``); it writes
metrics.jsonl, eval/ and checkpoints/. Under ``harness.run.runner`` (``RUNNER_ENV`` set) it writes no result.json:
``train`` builds the run's record from those files and the runner writes result.json once. Run by hand, the
launcher writes result.json itself (through the same ``harness.run.runner.write_result``). The launcher and all it
starts run with SIGUSR2 ignored: SLURM's warning is the job process's to act on (harness/run/preempt.py); when the
launcher stopped after the checkpoint the job asked for, ``train`` raises KeyboardInterrupt (resume from there).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.backends.openrlhf import raycluster
from harness.backends.openrlhf.bridge import run_record
from harness.backends.openrlhf.flags import as_dict, build_plan
from harness.backends.openrlhf.launch import CHECKPOINTED_EXIT, RUNNER_ENV, require_openrlhf
from harness.run import preempt
from harness.run.records import RunResult


def command(plan, run_dir) -> list[str]:
    return [
        plan.python,
        "-m",
        "harness.backends.openrlhf.launch",
        os.path.abspath(os.fspath(run_dir)),
        "--",
        *plan.argv,
    ]


def is_worker_task(env=os.environ) -> bool:
    """A non-head task of a multi-node SLURM job: it only lends its node to the head's Ray cluster (unless Ray
    already runs there: ``RAY_ADDRESS``). The backend's ``worker_role`` answers with this rule."""
    return (
        int(env.get("SLURM_NNODES", "1") or 1) > 1
        and int(env.get("SLURM_PROCID", "0") or 0) != 0
        and not env.get("RAY_ADDRESS")
    )


def check_math_data(config) -> None:
    """A local JSONL prompt set graded by the math reward must ask for the last ``\\boxed{}`` the reward reads and
    carry golds the grader verifies (``harness data check``): an unconverted set trains on all-zero rewards (with
    dynamic filtering every step is filtered away) for as long as the job runs. Refused before Ray starts."""
    from harness.backends.openrlhf.options import parse_options
    from harness.data import check_training_file

    cfg = as_dict(config)  # a loaded Config or the plain dict build_plan also takes
    opts, path = parse_options(cfg.get("openrlhf")), Path((cfg.get("task") or {}).get("name", ""))
    if opts.reward != "math" or path.suffix != ".jsonl" or not path.is_file():
        return
    check_training_file(path, input_key=opts.input_key, label_key=opts.label_key)


def train(config, run_dir, log=None) -> RunResult | dict:
    """Run one OpenRLHF training run; returns its RunResult (the runner adds status and wall time and writes
    result.json). Bad input raises before Ray starts; a failed run raises RuntimeError; a run stopped after the
    checkpoint its job asked for raises KeyboardInterrupt. A SLURM worker task lends its node to the head's Ray
    until the head's launcher ends: it returns ``{"worker": "done"}`` when the head ended well (or stopped to be
    requeued) and raises RuntimeError when the head failed or vanished (the head's error is the cell's)."""
    plan = build_plan(config, run_dir)  # config errors first, even where OpenRLHF is missing
    check_math_data(config)
    require_openrlhf()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **plan.env, RUNNER_ENV: "1"}
    out_path = run_dir / "openrlhf.log"
    if log:
        log(f"openrlhf: launching ({len(plan.argv)} flags); output in {out_path}")
    worker = is_worker_task()
    if worker:  # each SLURM task has its own log; only the head's output matters for the run
        out_path = run_dir / f"openrlhf.task{os.environ.get('SLURM_PROCID')}.log"
    with open(out_path, "ab") as out:
        proc = subprocess.run(
            command(plan, run_dir),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=preempt.ignore_warning_signal,  # SLURM's USR2 reaches every process of the task
        )
    if proc.returncode == CHECKPOINTED_EXIT and not worker:
        step = preempt.saved_step(run_dir)
        msg = f"interrupted (checkpoint requested by the job) after step {step}; checkpoint saved"
        if log:
            log(f"openrlhf: {msg} to {run_dir / 'checkpoints' / 'openrlhf'}; the next attempt resumes from it")
        raise KeyboardInterrupt(msg)
    if proc.returncode != 0:
        tail = out_path.read_text(errors="replace")[-2000:] if out_path.exists() else ""
        if worker:  # the head's error is the cell's (its job_error.json / result.json); this is why the worker ended
            why = raycluster.WORKER_EXITS.get(proc.returncode, "its launcher failed")
            raise RuntimeError(
                f"worker task {os.environ.get('SLURM_PROCID')}: {why} (exit {proc.returncode}); see {out_path}"
            )
        raise RuntimeError(f"OpenRLHF run failed (exit {proc.returncode}); see {out_path}. Last output:\n{tail}")
    if worker:
        return {"worker": "done"}
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return run_record(cfg, run_dir, plan.plugin["method"])
