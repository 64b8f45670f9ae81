"""Retry only the after-training evaluation of a finished run: ``harness train RUN/config.yaml --run-dir RUN
--eval-only`` (the command a failed stage writes into result.json as ``eval_retry``; ``harness status`` shows it).

Under the run lock: the run must have finished training (result.json ``completed`` or ``insufficient_updates``)
with this config; the stage runs again (its generations resume where the failed attempt stopped) and result.json
is rewritten, atomically, with the suites attached and ``eval_status: completed``. Nothing is trained. A stage that
fails again keeps the run finished and records the new error.
"""

from __future__ import annotations

import os
from pathlib import Path


def retry(cfg, run_dir, quiet: bool = False) -> dict:
    """Score the finished run in ``run_dir`` again and return its rewritten result.json content; ValueError when
    the directory holds no finished run of ``cfg`` or ``cfg`` has no after-training stage."""
    from harness.backends import get_backend
    from harness.backends.base import harness_train_command
    from harness.run.after_training import attach, failed, retry_command, run_stage
    from harness.run.rundir import RunDirLock
    from harness.run.runner import FINISHED, RunLog, read_result, write_result

    run_dir = Path(run_dir)
    if not cfg.eval.after_training:
        raise ValueError(f"--eval-only: {run_dir}'s config has no after-training stage (eval.after_training: false)")
    with RunDirLock(run_dir):
        result = read_result(run_dir)
        if result is None or result.get("status") not in FINISHED:
            status = "no result.json" if result is None else f"status {result.get('status')!r}"
            raise ValueError(
                f"--eval-only: {run_dir} has not finished training ({status}); train it first: "
                f"{harness_train_command(os.path.abspath(run_dir))}"
            )
        if result.get("run_id") != cfg.run_id():
            raise ValueError(
                f"--eval-only: {run_dir} holds run {result.get('run_id')}, and this config is run {cfg.run_id()}; "
                f"{_own_config_hint(run_dir)}"
            )
        log = RunLog(run_dir, quiet=quiet)
        log(f"run {cfg.run_id()}: retrying only the after-training evaluation (training finished: nothing retrains)")
        try:
            stage = run_stage(cfg, run_dir, get_backend(cfg.backend), log)
        except Exception as e:
            write_result(run_dir, failed(dict(result), e, run_dir))
            log(f"error: the evaluation failed again ({type(e).__name__}: {e}); retry: {retry_command(run_dir)}")
            raise
        before = result.get("eval_status")
        result = attach(dict(result), stage)
        write_result(run_dir, result)
        log(f"evaluation attached to {run_dir / 'result.json'} (eval_status {before} -> {result['eval_status']})")
        return result


def _own_config_hint(run_dir: Path) -> str:
    """Where the run's own config is, or why it cannot serve (a config.yaml cut short reads as another run)."""
    from harness.io import load_yaml, read_text
    from harness.run.config import cut_short

    path = run_dir / "config.yaml"
    try:
        stored = load_yaml(read_text(path)) if path.is_file() else None
        gap = cut_short(stored) if isinstance(stored, dict) else ""
    except Exception:  # noqa: BLE001 - unreadable: the hint names the file all the same
        gap = ""
    if gap:
        return f"{path}: {gap}; give the config it trained with"
    return f"give the run's own config ({path})"
