"""``harness.run.runner.run`` for a population: every member's run directory is checked, claimed and finished as a
separate run's would be (the same refusals, config.yaml, train.log lines, and its end through ``runner.finish``:
the after-training stage and result.json), and the members train together (population.py).

``run_population(configs, run_dirs)`` returns, per member, its result.json content, or the exception that stopped
it (a refusal before anything was written, or a failure recorded in its result.json as ``status: failed``).
A member already finished is returned as it is. Ctrl-C / SIGTERM checkpoints every member and raises
``KeyboardInterrupt`` (no result written), as a separate run does.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from harness.run.runner import RunLog, apply_plan, check_run_dir, finish, read_result


def run_population(configs, run_dirs, quiet: bool = False) -> list:
    """Train the runs ``configs`` (RunConfig) into ``run_dirs`` as one population."""
    from harness.backends import get_backend
    from harness.run.rundir import RunDirLock, check_placement

    from .population import Population, why_apart
    from .trainer import PocketTrainer

    problem = why_apart(configs)
    if problem:
        raise ValueError(f"population: {problem}")
    backend = get_backend("pocket")
    out: list = [None] * len(configs)
    with ExitStack() as locks:
        members, logs, starts = [], {}, {}
        for k, (cfg, d) in enumerate(zip(configs, run_dirs)):
            d = Path(d)
            try:
                check_placement(d, "cell" if (d / "cell.json").is_file() else "run")
                d.mkdir(parents=True, exist_ok=True)
                locks.enter_context(RunDirLock(d))
                plan = check_run_dir(cfg, d, False, backend)  # every refusal before any file changes
            except (ValueError, OSError) as e:
                out[k] = e
                continue
            log = logs[k] = RunLog(d, quiet=quiet)
            if plan.action == "done":
                log(f"{d}: already completed (run {cfg.run_id()})")
                out[k] = read_result(d)
                continue
            apply_plan(plan, cfg, d, log)
            starts[k] = time.time()
            log(
                f"run {cfg.run_id()}: {cfg.method_name} on {cfg.model.name} / {cfg.task.name}, seed {cfg.seed} -> {d} "
                f"(population of {len(configs)})"
            )
            members.append(k)
        if not members:
            return out
        trainers = [PocketTrainer(configs[k], Path(run_dirs[k]), log=logs[k]) for k in members]
        results = Population(trainers, log=logs[members[0]]).run()
        for k, record in zip(members, results):
            try:
                out[k] = finish(configs[k], Path(run_dirs[k]), backend, record, logs[k], starts[k])
            except Exception as e:  # noqa: BLE001 - recorded in its result.json: that member failed, the rest go on
                logs[k](f"failed: {type(e).__name__}: {e}")
                out[k] = e
    return out
