"""OpenRLHF logs -> the harness run directory: ``metrics.jsonl`` rows (docs/contracts.md §3) and ``result.json``.

A key OpenRLHF did not measure stays missing (never 0). OpenRLHF's own numeric keys are kept under
``openrlhf/<key>`` so nothing is lost.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from harness.evals.result import SuiteResult
from harness.io import append_jsonl, read_jsonl
from harness.run.metrics import UPDATE_SKIPPED, add_eval
from harness.run.records import RunResult, result_payload, summarize_metrics, task_label, write_step_eval

# harness key -> OpenRLHF status key (first present wins)
RENAMES = {
    "reward/mean": ("rollout/reward_mean", "reward"),
    "entropy": ("harness/entropy_rollout", "harness/entropy"),  # pre-update eval-mode pass, else training forwards
    "clipfrac": ("ppo_clip_ratio",),
    "ppo_kl": ("ppo_kl",),
    "response/length": ("rollout/response_length_mean", "response_length"),
    "lr": ("actor_lr",),
    "time/rollout": ("timing/generation",),
    "time/update": ("timing/ppo_train",),
}
PASS_PREFIXES = ("cov/", "selected/", "kl_cov/", "reward/", "rollout_correction/")
PASS_KEYS = ("rollout/neg_logprob", "entropy/rollout_token_mean")  # the step's rollout measures (plugin)
# dynamic filtering's counts (plugin.generation_stats), the pocket backend's keys and the cap
PASS_KEYS += ("rollout/batches", "rollout/kept_groups", "filter/kept_frac", "filter/gen_cap_hit")
SKIPPED_KEY = "harness/update_skipped"  # the plug-in's mark on a step's status that trained nothing


def _number(v):
    if hasattr(v, "item") and getattr(v, "numel", lambda: 1)() == 1:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def to_harness_metrics(
    status: dict,
    step: int,
    prev_entropy: float | None = None,
    wall_s: float | None = None,
    method_name: str | None = None,
) -> dict:
    """One ``metrics.jsonl`` row from an OpenRLHF step status dict; the method's own ``<method_name>/...``
    metrics keep their names."""
    row = {"step": int(step)}
    prefixes = PASS_PREFIXES + ((f"{method_name}/",) if method_name else ())
    used = set()
    for key, sources in RENAMES.items():
        for src in sources:
            value = _number(status.get(src))
            if value is not None:
                row[key] = value
                used.add(src)
                break
    for key, value in status.items():
        value = _number(value)
        if value is None or key in used:
            continue
        if key.startswith(prefixes) or key in PASS_KEYS:
            row[key] = value
        else:
            row[f"openrlhf/{key}"] = value
    per_sample, samples = _number(status.get("harness/selected_per_sample")), _number(status.get("rollout/num_samples"))
    if per_sample is not None and samples is not None:
        row["selected/count"] = per_sample * samples  # tokens selected over the step's samples (1 epoch)
    fwd, pad, micro = (_number(status.get(f"harness/{k}")) for k in ("forward_tokens", "pad_tokens", "micro_batches"))
    if fwd and pad is not None and micro:  # sample-weighted step means of per-row shares: their ratios are exact
        row["batch/pad_frac"] = pad / fwd  # padded / forwarded tokens of the step's training micro-batches
        row["batch/tokens"] = fwd / micro  # tokens a training forward processed, per micro-batch and GPU
    if row.pop(f"openrlhf/{SKIPPED_KEY}", None):  # the plug-in's mark: no training step ran (warn_short_buffer)
        row[UPDATE_SKIPPED] = True
    if "entropy" in row and prev_entropy is not None:
        row["entropy/delta"] = row["entropy"] - prev_entropy
    if wall_s is not None:
        row["time/wall"] = float(wall_s)
    return row


def eval_payload(eval_logs: dict, step: int, spec: dict) -> dict:
    """OpenRLHF's ``eval_<datasource>_pass1|pass<n>`` logs -> ``{"step", "suites"}`` (docs/contracts.md §4)."""
    n = int(spec["n_samples"])
    counts = spec.get("counts")
    if counts is None and spec.get("dataset"):  # eval.suites: the file the launcher wrote
        from harness.backends.openrlhf.flags import datasource_counts

        counts = datasource_counts(spec["dataset"])
    suites = {}
    for key, value in eval_logs.items():
        if not (key.startswith("eval_") and key.endswith("_pass1")):
            continue
        ds = key[len("eval_") : -len("_pass1")]
        metrics = {f"avg@{n}": _number(value)}
        if n > 1 and _number(eval_logs.get(f"eval_{ds}_pass{n}")) is not None:
            metrics[f"pass@{n}"] = _number(eval_logs[f"eval_{ds}_pass{n}"])
        suites[ds] = SuiteResult(
            suite=ds,
            n_problems=(counts or {}).get(ds),
            n_samples=n,
            temperature=spec["temperature"],
            top_p=spec["top_p"],
            max_tokens=spec["max_tokens"],
            metrics=metrics,
            primary=f"avg@{n}",
        ).to_dict()
    return {"step": int(step), "suites": suites}


def eval_metrics_row(payload: dict) -> dict:
    """``eval/<suite>/<metric>`` keys for the step's metrics.jsonl row (a metric upstream did not report: none)."""
    row: dict = {}
    add_eval(row, payload)
    return {k: v for k, v in row.items() if v is not None}


def write_eval(run_dir, payload: dict) -> Path:
    return write_step_eval(run_dir, payload)


def last_eval(run_dir) -> dict | None:
    files = sorted(Path(run_dir, "eval").glob("step_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    return json.loads(files[-1].read_text()) if files else None


def metrics_path(run_dir) -> Path:
    return Path(run_dir) / "metrics.jsonl"


def append_metrics(run_dir, row: dict) -> None:
    """Append a row; a step already logged (a resumed run replaying it) is not written twice."""
    path = metrics_path(run_dir)
    if path.exists():
        done = {r.get("step") for r in read_jsonl(path)}
        if row["step"] in done:
            return
    append_jsonl(path, row)


def add_to_row(run_dir, step: int, keys: dict) -> None:
    """Merge ``keys`` (a step's eval metrics) into that step's metrics.jsonl row (the file is rewritten
    atomically); a step not logged yet gets a row of its own."""
    from harness.io import atomic_write_text

    path = metrics_path(run_dir)
    rows = read_jsonl(path) if path.exists() else []
    for row in rows:
        if row.get("step") == int(step):
            row.update(keys)
            break
    else:
        append_jsonl(path, {"step": int(step), **keys})
        return
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def logged_row(run_dir, step: int) -> dict | None:
    """The metrics.jsonl row of ``step`` (None when the step was not logged)."""
    path = metrics_path(run_dir)
    return next((r for r in (read_jsonl(path) if path.exists() else []) if r.get("step") == int(step)), None)


def run_record(config: dict, run_dir, method_config: dict) -> RunResult:
    """The run's record (harness/run/records.py) from its metrics.jsonl and eval/ files."""
    path = metrics_path(run_dir)
    rows = read_jsonl(path) if path.exists() else []
    timing = {}
    for ours, theirs in (("rollout_s", "time/rollout"), ("update_s", "time/update")):
        vals = [r[theirs] for r in rows if r.get(theirs) is not None]
        if vals:
            timing[ours] = sum(vals)
    return RunResult(
        method=method_config.get("name"),
        advantage=method_config.get("advantage"),
        method_config=method_config,
        model=(config.get("model") or {}).get("name"),
        model_params=None,
        task=task_label((config.get("task") or {}).get("name")),
        seed=config.get("seed"),
        steps=max((r["step"] for r in rows), default=0),
        summary=summarize_metrics(rows),
        eval=last_eval(run_dir),
        timing=timing,
        extra={"checkpoint": os.path.join(os.fspath(run_dir), "checkpoints", "final")},
    )


def build_result(config: dict, run_dir, status: str, wall_time_s: float, run_id: str, method_config: dict) -> dict:
    """The full result.json payload (schema_version 1) of a launch run outside ``harness.run.runner``."""
    fields = run_record(config, run_dir, method_config).to_dict()
    return result_payload(run_id, "openrlhf", config.get("name"), status, fields, float(wall_time_s))


def write_result(run_dir, payload: dict) -> Path:
    from harness.run.runner import write_result

    return write_result(run_dir, payload)
