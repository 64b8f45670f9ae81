"""A model scored by lm-evaluation-harness, read from its results JSON, as leaderboard rows (``harness table
--import-lm-eval FILE``).

Reads what ``lm_eval --output_path`` writes (``results_<date>.json``) and what ``harness eval --lm-eval-tasks``
writes (``lm_eval_results.json``: the same document plus a ``harness`` block). Per task: one metric (``avg_at_k`` for
our ``harness_<suite>`` tasks, else the first metric lm-eval reports for it that is higher-is-better), its value and
the protocol lm-eval ran: problems (``n-samples.effective``), samples per problem (``repeats``), temperature (0 when
``do_sample`` is off), top-p, ``max_gen_toks`` and few-shot count. A ``harness_<suite>`` task lines up with our
``<suite>`` column; any other task is a column of its own. Group entries (aggregates of other tasks) are skipped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "harness_"
NOT_METRICS = ("alias", "name", "sample_len", " ")


@dataclass
class ImportedTask:
    task: str  # lm-eval's task name
    column: str  # the leaderboard column it fills
    metric: str  # "<metric>,<filter>" as lm-eval names it
    value: float  # as lm-eval reports it (a fraction for accuracy-like metrics)
    stderr: float | None
    protocol: dict = field(default_factory=dict)  # n_problems, n_samples, temperature, top_p, max_tokens, num_fewshot

    def protocol_text(self) -> str:
        p = self.protocol
        return (
            f"{self.metric}; problems={p.get('n_problems')}, n={p.get('n_samples')}, T={p.get('temperature')}, "
            f"top_p={p.get('top_p')}, max_tokens={p.get('max_tokens')}, fewshot={p.get('num_fewshot')}"
        )


@dataclass
class ImportedModel:
    path: str
    model: str
    lm_eval_version: str | None
    date: str | None
    tasks: list[ImportedTask]
    skipped: list[str] = field(default_factory=list)  # "task: why"


def _model_name(doc: dict, path: Path) -> str:
    """``harness.model`` (harness eval), else ``pretrained=`` of lm-eval's ``model_args``, else its model type."""
    name = (doc.get("harness") or {}).get("model")
    config = doc.get("config") or {}
    args = config.get("model_args")
    if not name and isinstance(args, dict):
        name = args.get("pretrained") or args.get("model")
    if not name and isinstance(args, str):
        for part in args.split(","):
            key, _, value = part.partition("=")
            if key.strip() in ("pretrained", "model") and value.strip():
                name = value.strip()
                break
    name = str(name or config.get("model") or path.stem).rstrip("/")
    return Path(name).name if Path(name).exists() else name


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _pick_metric(task: str, scores: dict, higher: dict) -> str | None:
    keys = [k for k in scores if "_stderr" not in k and k not in NOT_METRICS and "," in k and _number(scores[k])]
    wanted = ["avg_at_k"] if task.startswith(PREFIX) else []
    wanted += [m for m, better in (higher or {}).items() if better]
    for metric in wanted:
        for k in keys:
            if k.split(",")[0] == metric:
                return k
    return None


def _protocol(config: dict, n_samples: dict | None, n_shot) -> dict:
    gen = config.get("generation_kwargs") or {}
    sampled = bool(gen.get("do_sample"))
    return {
        "n_problems": (n_samples or {}).get("effective"),
        "n_samples": config.get("repeats", 1),
        "temperature": float(gen.get("temperature", 1.0)) if sampled else 0.0,
        "top_p": float(gen.get("top_p", 1.0)) if gen.get("top_p") is not None else 1.0,
        "max_tokens": gen.get("max_gen_toks", 256),  # lm-eval's default when the task sets none
        "num_fewshot": n_shot if n_shot is not None else config.get("num_fewshot"),
    }


def read_lm_eval(path: str | Path) -> ImportedModel:
    """One lm-eval results file; a file that is not one gives a ``ValueError`` naming it and what it needs."""
    from .reference import canonical_suite

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--import-lm-eval {path}: no such file")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"--import-lm-eval {path}: not readable JSON ({e})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("results"), dict) and isinstance(doc.get("configs"), dict)):
        raise ValueError(
            f"--import-lm-eval {path}: not an lm-eval results document (needs 'results' and 'configs': the "
            "results_<date>.json of `lm_eval --output_path`, or lm_eval_results.json of `harness eval "
            "--lm-eval-tasks`; an lm_eval_results.json from before issue 27 holds only scores, no protocol: rerun it)"
        )
    tasks, skipped = [], []
    for task, scores in doc["results"].items():
        config = doc["configs"].get(task)
        if not isinstance(config, dict):  # a group: an aggregate of tasks listed on their own
            continue
        metric = _pick_metric(task, scores, (doc.get("higher_is_better") or {}).get(task))
        if metric is None:
            skipped.append(f"{task}: no higher-is-better metric with a number")
            continue
        stderr = scores.get(metric.replace(",", "_stderr,", 1))
        name = task[len(PREFIX) :] if task.startswith(PREFIX) else task
        tasks.append(
            ImportedTask(
                task=task,
                column=canonical_suite(name),
                metric=metric,
                value=float(scores[metric]),
                stderr=float(stderr) if _number(stderr) else None,
                protocol=_protocol(config, (doc.get("n-samples") or {}).get(task), (doc.get("n-shot") or {}).get(task)),
            )
        )
    if not tasks:
        raise ValueError(f"--import-lm-eval {path}: no task with a usable score ({'; '.join(skipped) or 'empty'})")
    return ImportedModel(
        path=str(path),
        model=_model_name(doc, path),
        lm_eval_version=doc.get("lm_eval_version"),
        date=str(doc["date"]) if doc.get("date") is not None else None,
        tasks=tasks,
        skipped=skipped,
    )
