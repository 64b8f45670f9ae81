"""The run record and the eval-suite record (docs/contracts.md §2, §4): one shape on every backend.

A backend's ``train`` returns a ``RunResult``; ``harness.run.runner`` adds the run's head (schema version, run id,
backend, name, status, wall time) and writes ``result.json`` once (``harness.run.runner.write_result``). Every
backend builds its eval suites as ``SuiteResult`` and its start/end summary with ``summarize_metrics``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.evals.result import SuiteResult  # (its home is the evals layer)
from harness.run.metrics import edge_steps  # noqa: F401  (re-exported: the one start/end window)
from harness.run.metrics import summarize as _summarize

SCHEMA_VERSION = 1
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
MODEL_SUITE_FILE = "harness_task.json"  # in an exported pocket model directory: the run's task as an eval suite
MODEL_RUN_FILE = "harness_run.json"  # in every exported model directory: the run it came from (write_model_run)


def write_model_run(model_dir, cfg, run_dir, step: int | None) -> None:
    """``model_dir/harness_run.json``: the run a model directory was exported from (run id, run dir, backend,
    method, seed, model, step), so an eval of that directory attaches to the run instead of an eval-only row."""
    import os
    from pathlib import Path

    from harness.io import atomic_write_json

    atomic_write_json(
        Path(model_dir) / MODEL_RUN_FILE,
        {
            "run_id": cfg.run_id(),
            "run_dir": os.path.abspath(run_dir),
            "backend": cfg.backend,
            "method": cfg.method_name,
            "advantage": cfg.method.get("advantage"),
            "seed": cfg.seed,
            "model": cfg.model.name,
            "task": cfg.task.name,
            "step": step,
        },
    )


def read_model_run(model_dir) -> dict | None:
    """The ``harness_run.json`` of a model directory (None when it was not exported from a run)."""
    import json
    from pathlib import Path

    path = Path(str(model_dir)) / MODEL_RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None


def summarize_metrics(rows: Iterable[dict]) -> dict:
    """``entropy_start/end``, ``reward_start/end``: means of ``entropy`` and ``reward/mean`` over the first and
    last ``edge_steps(N)`` of the N logged steps (harness/run/metrics.py: a tenth, at least 1, at most 5); a step
    without the value is skipped (never counted as 0)."""
    return _summarize(rows)


def task_label(name: str | None) -> str | None:
    """The ``task`` of a record: a data file's stem (``data/dapo.jsonl`` -> ``dapo``), else the name as given
    (a registered task such as ``countdown``, or a hub dataset id)."""
    if not name:
        return name
    p = Path(str(name))
    return p.stem if p.suffix in DATA_SUFFIXES or p.is_file() else str(name)


@dataclass
class RunResult:
    """What a backend's ``train`` returns: the result.json fields below the runner's head."""

    method: str
    advantage: str | None
    method_config: dict
    model: str
    model_params: int | None
    task: str | None  # task_label(task.name) on every backend
    seed: int
    steps: int  # steps done
    summary: dict  # summarize_metrics(metrics.jsonl rows)
    eval: dict | None  # {"step": N, "suites": {name: SuiteResult.to_dict()}} of the last eval
    timing: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # backend-only keys (pocket: warm_start; openrlhf: checkpoint)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**d, **self.extra}


def trained_record(cfg, method, model_params, steps: int, rows: list, last_eval, timing: dict, extra: dict):
    """The record of a run trained by a harness loop (pocket, TRL): the method's name, advantage and config, the
    summary of its metrics rows, its last eval, its timing (seconds to the ms, and the process's peak RSS)."""
    return RunResult(
        method=cfg.method_name,
        advantage=method.advantage,
        method_config=method.to_config(),
        model=cfg.model.name,
        model_params=model_params,
        task=task_label(cfg.task.name),
        seed=cfg.seed,
        steps=steps,
        summary=summarize_metrics(rows),
        eval=last_eval,
        timing={**{k: round(v, 3) for k, v in timing.items()}, "peak_rss_mb": peak_rss_mb()},
        extra=extra,
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB; ru_maxrss is KB on Linux, bytes on macOS)."""
    import resource
    import sys

    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return round(kb / 1024, 1)


def task_eval_doc(cfg, step: int, n_problems: int, metrics: dict) -> dict:
    """A step's eval document ``{step, suites: {task: SuiteResult}}`` for a held-out eval of the run's own task
    under its eval protocol (``cfg.eval``): the pocket and TRL loops' eval."""
    ec = cfg.eval
    suite = task_label(cfg.task.name)
    result = SuiteResult(
        suite=suite,
        n_problems=n_problems,
        n_samples=ec.n_samples,
        temperature=ec.temperature,
        top_p=ec.top_p,
        max_tokens=ec.max_new_tokens or cfg.train.max_new_tokens,
        metrics=metrics,
        primary=f"avg@{ec.n_samples}",
    )
    return {"step": step, "suites": {suite: result.to_dict()}}


def write_step_eval(run_dir, doc: dict) -> Path:
    """``eval/step_<step>.json``: a step's eval document, on every backend."""
    from harness.io import atomic_write_json

    return atomic_write_json(Path(run_dir) / "eval" / f"step_{doc['step']}.json", doc)


def result_payload(run_id: str, backend: str, name: str | None, status: str, fields: dict, wall_time_s: float) -> dict:
    """The full result.json content: the head, the backend's fields, the wall time."""
    head = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "backend": backend, "name": name, "status": status}
    return {**head, **{k: v for k, v in fields.items() if k not in head}, "wall_time_s": round(wall_time_s, 2)}
