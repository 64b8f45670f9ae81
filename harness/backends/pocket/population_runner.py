"""``harness.run.runner.run`` for a population: every member's run directory is checked, claimed and finished as a
separate run's would be (the same refusals, config.yaml, train.log lines, result.json through
``runner.write_result``), and the members train together (population.py).

``run_population(configs, run_dirs)`` returns, per member, its result.json content, or the exception that stopped
it (a refusal before anything was written, or a failure recorded in its result.json as ``status: failed``).
A member already finished is returned as it is. Ctrl-C / SIGTERM checkpoints every member and raises
``KeyboardInterrupt`` (no result written), as a separate run does.
"""

from __future__ import annotations

import time
import traceback
from contextlib import ExitStack
from pathlib import Path

from harness import provenance
from harness.run.metrics import FAILED, summary_line
from harness.run.records import RunResult, result_payload
from harness.run.runner import (
    RunLog,
    apply_plan,
    check_run_dir,
    count_updates,
    finished_status,
    read_result,
    task_datasets,
    write_result,
)


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
            out[k] = _finish(configs[k], Path(run_dirs[k]), backend, record, logs[k], time.time() - starts[k])
    return out


def _finish(cfg, run_dir: Path, backend, record, log, wall_s: float):
    """What ``runner._run_locked`` does after ``backend.train``: attach the after-training eval, write result.json
    (failed with the error, or finished with provenance and the update count)."""

    def payload(status: str, fields: dict) -> dict:
        return result_payload(cfg.run_id(), cfg.backend, cfg.name, status, fields, wall_s)

    error = record if isinstance(record, BaseException) else None
    fields = None
    if error is None:
        fields = record.to_dict() if isinstance(record, RunResult) else dict(record or {})
        if cfg.eval.after_training:
            from harness.run.after_training import attach, run_stage

            try:
                fields = attach(fields, run_stage(cfg, run_dir, backend, log))
            except Exception as e:  # noqa: BLE001 - recorded as the run's failure, as the runner does
                error = e
                error.population_traceback = traceback.format_exc()[-4000:]
    if error is not None:
        failed = {
            "method": cfg.method_name,
            "model": cfg.model.name,
            "seed": cfg.seed,
            "error": f"{type(error).__name__}: {error}",
            "traceback": getattr(error, "population_traceback", "")[-4000:],
        }
        write_result(run_dir, payload(FAILED, failed))
        log(f"failed: {type(error).__name__}: {error}")
        return error
    fields["provenance"] = provenance.collect(datasets=fields.pop("datasets", None) or task_datasets(cfg))
    fields["updates"] = updates = count_updates(run_dir, cfg.train.steps)
    result = payload(finished_status(updates), fields)
    write_result(run_dir, result)
    log(f"done: {summary_line(result.get('summary'))}; {run_dir / 'result.json'}")
    return result
