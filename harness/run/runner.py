"""Run one training run into a run directory (docs/contracts.md §2, §5).

``run(config, run_dir, force=False)``:
- writes the resolved ``config.yaml`` (its hash is the run id);
- refuses a run directory that holds a *different* config unless ``force``; with ``force`` the old files are
  moved to ``replaced/<old run id>-<time>/`` (never deleted);
- a directory whose ``result.json`` says ``completed`` for the same config is returned as is (``force`` reruns);
- otherwise trains through the backend registry, which resumes from ``checkpoints/`` when present;
- writes ``result.json`` last and atomically, once, from the backend's ``RunResult`` (harness/run/records.py); it is
  the only writer of that file (``write_result``), through ``finish``, the end of a run that each member of a
  population shares (harness/backends/pocket/population_runner.py). A crash writes it with ``status: failed`` and
  the error (a rerun moves that file aside and resumes); Ctrl-C writes no result (the checkpoint is the state,
  rerun resumes);
- holds the run directory's lock (harness/run/rundir.py) for the whole run: a second trainer is refused with one line
  naming the holder; a run directory inside a sweep's runs directory or another run (or holding runs) is refused;
- repairs a ``metrics.jsonl`` whose last line a kill tore (the lost bytes are named in the log);
- counts the steps that updated the policy: ``updates: {made, expected}``; fewer than ``MIN_UPDATE_FRACTION`` of
  the expected ones ends with ``status: insufficient_updates`` (finished, not failed: tables flag it, never rank it).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness import provenance
from harness.io import (
    atomic_write_json,
    atomic_write_text,
    load_yaml,
    read_jsonl,
    read_text,
    repair_jsonl,
    yaml_problem,
)
from harness.run.config import RunConfig, cut_short, diff_configs, load_config, run_id_of
from harness.run.identity import config_drift
from harness.run.metrics import COMPLETED, FAILED, FINISHED, INSUFFICIENT_UPDATES, STEP, UPDATE_SKIPPED, summary_line
from harness.run.records import SCHEMA_VERSION, RunResult, result_payload, task_label  # noqa: F401  (SCHEMA_VERSION re-exported)
from harness.run.rundir import RUN_FILES  # (its list of a run's files)

MIN_UPDATE_FRACTION = 0.5


class RunLog:
    """Prints a line and appends it to ``train.log``."""

    def __init__(self, run_dir: Path, quiet: bool = False):
        self.path, self.quiet = run_dir / "train.log", quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)
        try:
            with open(self.path, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}\n")
        except OSError:  # a full disk: the line was printed; the run's own error says what failed
            pass


def _archive(run_dir: Path, old_id: str) -> Path | None:
    from harness.backends import run_file_patterns

    present = [run_dir / n for n in RUN_FILES if (run_dir / n).exists()]
    present += [p for pattern in run_file_patterns() for p in sorted(run_dir.glob(pattern))]
    if not present:
        return None
    dest = run_dir / "replaced" / f"{old_id}-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True, exist_ok=True)
    for p in present:
        os.replace(p, dest / p.name)
    return dest


def read_result(run_dir: str | os.PathLike) -> dict | None:
    """``result.json`` as a dict; None when it is absent or unreadable (``result_state`` tells which)."""
    return result_state(Path(run_dir))[0]


def result_state(run_dir: Path) -> tuple[dict | None, str | None]:
    """``(result, problem)``: the parsed ``result.json`` (None when absent or unreadable) and why it could not be
    read (None when absent or fine)."""
    import json

    p = run_dir / "result.json"
    if not p.exists():
        return None, None
    try:
        data = json.loads(read_text(p))
    except (ValueError, OSError) as e:
        return None, str(e).splitlines()[0] if str(e) else type(e).__name__
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def run_content(run_dir: Path) -> list[str]:
    """The files that make ``run_dir`` some run's: result.json, metrics.jsonl, a non-empty checkpoints/, eval
    results of training steps (eval/step_<N>.json)."""
    out = [n for n in ("result.json", "metrics.jsonl") if (run_dir / n).exists()]
    if (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
        out.append("checkpoints/")
    if any((run_dir / "eval").glob("step_*.json")):
        out.append("eval/step_*.json")
    return out


@dataclass
class RunDirPlan:
    """What ``check_run_dir`` decided: ``done`` (the same run finished) or ``train``; with ``--force`` the old
    files to move to ``replaced/<archive>-<time>``; ``aside`` labels a failed or unreadable result.json to keep."""

    action: str
    archive: str | None = None
    aside: str | None = None
    problem: str | None = None


def check_run_dir(cfg: RunConfig, run_dir: Path, force: bool = False, backend=None) -> RunDirPlan:
    """Compare what ``run_dir`` holds (config.yaml, checkpoint lineage, result.json) with ``cfg`` without writing
    anything: a refusal (``ValueError``) changes no file. The backend checks its checkpoints
    (``Backend.check_resume``: another run's, one past ``train.steps``, another thread count)."""
    new_id = cfg.run_id()
    cfg_path = run_dir / "config.yaml"
    old = None
    if cfg_path.exists():
        try:
            old = load_yaml(read_text(cfg_path))
            if not isinstance(old, dict):
                raise ValueError("not a mapping")
        except (ValueError, yaml.YAMLError) as e:
            problem = yaml_problem(e) if isinstance(e, yaml.YAMLError) else str(e).removeprefix(f"{cfg_path}: ")
            if not force:
                raise ValueError(
                    f"run directory {run_dir}: its config.yaml is unreadable ({problem}), so what it holds cannot "
                    f"be checked against this run ({new_id}). Use another --run-dir, or "
                    f"--force to move its files to {run_dir}/replaced/"
                ) from None
            return RunDirPlan("train", archive="unreadable-config")
        drift = config_drift(run_dir, old)  # config.yaml edited after the run started: not what the files hold
        if drift is not None:
            if not force:
                raise ValueError(
                    f"run directory {run_dir}: {drift[1]}. Restore its config.yaml, use another --run-dir, or "
                    f"--force to move the old run to {run_dir}/replaced/"
                )
            return RunDirPlan("train", archive=drift[0])
        old_id = run_id_of(old)
        if old_id != new_id:
            old_id = _run_id_of_file(old)
        if old_id != new_id:
            if not force:
                shown = cut_short(old)
                if not shown:
                    diffs = diff_configs(old, cfg.to_dict())
                    shown = "; ".join(diffs[:6]) + (f"; ... ({len(diffs)} differences)" if len(diffs) > 6 else "")
                raise ValueError(
                    f"run directory {run_dir} holds a different config in its config.yaml (run {old_id}, this is "
                    f"{new_id}): {shown}. Use another --run-dir, or --force to move the old run to "
                    f"{run_dir}/replaced/"
                )
            return RunDirPlan("train", archive=old_id)
    elif run_content(run_dir):
        if not force:
            raise ValueError(
                f"run directory {run_dir} holds {', '.join(run_content(run_dir))} but no config.yaml, so they "
                f"cannot be checked against this run ({new_id}). Use another --run-dir, or --force to move them to "
                f"{run_dir}/replaced/"
            )
        return RunDirPlan("train", archive="no-config")
    result, problem = result_state(run_dir)
    if result is not None and result.get("status") in FINISHED:
        return RunDirPlan("train", archive=new_id) if force else RunDirPlan("done")
    check = getattr(backend, "check_resume", None)
    if check is not None:
        check(cfg, run_dir, old)
    if problem is not None:
        return RunDirPlan("train", aside="unreadable", problem=problem)
    return RunDirPlan("train", aside=str(result.get("status") or "old") if result is not None else None)


def _run_id_of_file(old: dict) -> str:
    """The run id of a directory's config.yaml resolved now: a hand-written (unresolved) config.yaml of the same
    run is that run (`harness train RUN/config.yaml --run-dir RUN`); the runner itself writes it resolved."""
    try:
        return load_config(old).run_id()
    except (ValueError, TypeError, KeyError):  # not a valid config today: its id as written
        return run_id_of(old)


def apply_plan(plan: RunDirPlan, cfg: RunConfig, run_dir: Path, log=print) -> None:
    """Carry out a checked plan: move old files aside (kept, never deleted), cut a torn metrics line, and write
    the resolved config.yaml."""
    if plan.archive:
        dest = _archive(run_dir, plan.archive)
        log(f"--force: moved the previous run ({plan.archive}) to {dest}; training from scratch")
    elif plan.aside:  # a failed (or unreadable) attempt: keep its result aside and resume
        dest = run_dir / f"result.{plan.aside}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        os.replace(run_dir / "result.json", dest)
        if plan.problem:
            log(f"warning: {run_dir / 'result.json'} is unreadable ({plan.problem}); kept as {dest.name}, resuming")
    lost = repair_jsonl(run_dir / "metrics.jsonl")
    if lost:
        log(
            f"warning: {run_dir / 'metrics.jsonl'} ended in a torn line (a killed writer); cut its last {lost} "
            f"bytes, every complete line kept"
        )
    atomic_write_text(run_dir / "config.yaml", cfg.to_yaml())
    provenance.stamp_run(run_dir, cfg.run_id(), cfg.to_dict(), log)  # kept through resumes; another code is noted


def prepare_run_dir(cfg: RunConfig, run_dir: Path, force: bool = False, log=print, backend=None) -> str:
    """Check ``run_dir`` against ``cfg``, then claim it: 'done' (the same run finished; nothing written) or 'go'."""
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = check_run_dir(cfg, run_dir, force, backend)
    if plan.action == "done":
        return "done"
    apply_plan(plan, cfg, run_dir, log)
    return "go"


def write_result(run_dir: str | os.PathLike, payload: dict) -> Path:
    """Write ``result.json`` (last, atomically): the one writer of that file."""
    return atomic_write_json(Path(run_dir) / "result.json", payload)


def count_updates(run_dir: Path, expected: int) -> dict:
    """``{made, expected}``: logged steps that updated the policy (a row with ``update/skipped`` made none)."""
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if STEP in r]
    made = sum(1 for r in rows if not r.get(UPDATE_SKIPPED))
    return {"made": made, "expected": int(expected)}


def finished_status(updates: dict) -> str:
    return INSUFFICIENT_UPDATES if updates["made"] < MIN_UPDATE_FRACTION * updates["expected"] else COMPLETED


def task_datasets(cfg: RunConfig) -> list[dict]:
    """Provenance of the training data: a data file's bytes (sha256), else the generated task's spec (name,
    options, test size: the generator is deterministic, and the code is the provenance's git commit)."""
    path = Path(cfg.task.name)
    if path.is_file():
        return [provenance.dataset_entry(task_label(cfg.task.name), path, role="train")]
    spec = {"task": cfg.task.name, "options": cfg.task.options, "test_size": cfg.task.test_size}
    return [provenance.dataset_entry(cfg.task.name, [spec], source="generated", role="train")]


def run(config, run_dir: str | os.PathLike, force: bool = False, quiet: bool = False) -> dict:
    """Train one run (resuming when possible) and return its result.json content."""
    from harness.run.rundir import RunDirLock, check_placement

    cfg = config if isinstance(config, RunConfig) else load_config(config)
    run_dir = Path(run_dir)
    check_placement(run_dir, "cell" if (run_dir / "cell.json").is_file() else "run")
    with RunDirLock(run_dir):
        return _run_locked(cfg, run_dir, force, quiet)


def _run_locked(cfg: RunConfig, run_dir: Path, force: bool, quiet: bool) -> dict:
    from harness.backends import get_backend

    backend = get_backend(cfg.backend)
    plan = check_run_dir(cfg, run_dir, force, backend)  # every refusal happens here, before any file changes
    log = RunLog(run_dir, quiet=quiet)
    if plan.action == "done":
        log(f"{run_dir}: already completed (run {cfg.run_id()}); --force to train again")
        return read_result(run_dir)
    apply_plan(plan, cfg, run_dir, log)
    started = time.time()
    log(f"run {cfg.run_id()}: {cfg.method_name} on {cfg.model.name} / {cfg.task.name}, seed {cfg.seed} -> {run_dir}")
    try:
        outcome = backend.train(cfg, run_dir, log=log)
    except Exception as e:  # recorded in result.json by finish, then raised again (Ctrl-C passes: no result)
        outcome = e
    return finish(cfg, run_dir, backend, outcome, log, started)


def finish(cfg: RunConfig, run_dir: Path, backend, outcome, log, started: float) -> dict:
    """The end of a run once its backend trained it, for a run and for each member of a population alike: the
    after-training stage (export -> score eval.suites -> attach; its failure leaves the finished run finished, with
    ``eval_status: failed``, the error and ``eval_retry``, the command that retries only the stage), then
    result.json, written once: ``failed`` with the error and its traceback (the error is then raised again), else
    finished with provenance and the update count (``insufficient_updates`` when too few steps updated the policy).
    ``outcome``: the backend's RunResult (or dict), or the exception that stopped its training; ``started``: when
    the run started (``time.time()``)."""

    def payload(status: str, fields: dict) -> dict:
        return result_payload(cfg.run_id(), cfg.backend, cfg.name, status, fields, time.time() - started)

    error = outcome if isinstance(outcome, BaseException) else None
    if error is None:
        try:
            fields = _after_training(cfg, run_dir, backend, outcome, log)
        except Exception as e:  # noqa: BLE001 - the backend's record itself is unreadable: the run's failure
            error = e
    if error is not None:
        _record_failure(cfg, run_dir, error, log, payload)
        raise error
    fields["provenance"] = provenance.for_run(run_dir, fields.pop("datasets", None) or task_datasets(cfg))
    fields["updates"] = updates = count_updates(run_dir, cfg.train.steps)
    result = payload(finished_status(updates), fields)
    write_result(run_dir, result)
    if result["status"] != COMPLETED:
        log(
            f"warning: only {updates['made']} of {updates['expected']} steps updated the policy (every group was "
            f"filtered or skipped); status {result['status']}: tables flag this run and never rank it"
        )
    log(f"done: {summary_line(result.get('summary'))}; {run_dir / 'result.json'}")
    return result


def _after_training(cfg: RunConfig, run_dir: Path, backend, record, log) -> dict:
    """The result fields of the backend's record, with the after-training eval attached when the config asks."""
    fields = record.to_dict() if isinstance(record, RunResult) else dict(record or {})
    if cfg.eval.after_training:
        from harness.run.after_training import attach, failed, run_stage

        try:
            fields = attach(fields, run_stage(cfg, run_dir, backend, log))
        except Exception as e:  # noqa: BLE001 - training finished: the run stays finished, its evaluation failed
            fields = failed(fields, e, run_dir)
            log(
                f"error: the after-training evaluation failed ({fields['eval_error'].splitlines()[0]}); training "
                f"finished and is kept. Retry only the evaluation: {fields['eval_retry']}"
            )
    return fields


def _record_failure(cfg: RunConfig, run_dir: Path, error: BaseException, log, payload) -> None:
    """result.json ``failed``: the error and its traceback (a write that fails too, e.g. a disk still full, is
    logged: the run's own error is the one raised)."""
    failed = {
        "method": cfg.method_name,
        "model": cfg.model.name,
        "seed": cfg.seed,
        "error": f"{type(error).__name__}: {error}",
        "traceback": "".join(traceback.format_exception(error))[-4000:],
    }
    try:
        write_result(run_dir, payload(FAILED, failed))
    except (OSError, ValueError) as write_error:
        log(f"warning: could not record the failure in result.json ({write_error})")
