"""The model card (``README.md``) of an exported model directory: method, eval table, training summary,
provenance and the run's config, so a model directory passed around on its own still says what it is.

Written by every backend's ``export`` through ``harness.run.exported.complete_export`` (``result`` is the run's
``result.json`` content, or None before it exists: an export made by the after-training stage). Without a result the
eval table comes from the run's in-loop eval at the exported step (``eval/step_<N>.json``) when there is one, and the
provenance is collected at export time (and says so). The YAML front matter is the Hugging Face hub's card
metadata (``library_name``, ``tags``, ``base_model`` when the policy started from a hub model).
"""

from __future__ import annotations

import json
from pathlib import Path

CARD_FILE = "README.md"
EVAL_COLUMNS = ("suite", "metric", "value", "problems", "samples", "T", "top_p", "max_tokens", "stage")


def _eval_at(run_dir: Path | None, step) -> dict | None:
    path = Path(run_dir) / "eval" / f"step_{step}.json" if run_dir is not None and step is not None else None
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def eval_table(ev: dict | None) -> list[str]:
    """Markdown lines: the primary metric of each suite first, then the others; the protocol on every line."""
    suites = (ev or {}).get("suites") or {}
    if not suites:
        return []
    lines = ["| " + " | ".join(EVAL_COLUMNS) + " |", "|" + "---|" * len(EVAL_COLUMNS)]
    for name, res in suites.items():
        metrics = res.get("metrics") or {}
        primary = res.get("primary")
        keys = [primary] * (primary in metrics) + [k for k in metrics if k != primary and not k.endswith("_stderr")]
        for k in keys:
            value = _fmt(metrics[k]) + (f" ± {_fmt(metrics[k + '_stderr'])}" if k + "_stderr" in metrics else "")
            cells = [name, f"**{k}**" if k == primary else k, value]
            cells += [_fmt(res.get(f)) for f in ("n_problems", "n_samples", "temperature", "top_p", "max_tokens")]
            cells.append(_fmt(res.get("stage") or "in training"))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _provenance_lines(prov: dict | None, where: str) -> list[str]:
    if not isinstance(prov, dict):
        return ["Not recorded."]
    commit = prov.get("git_commit")
    lines = [
        f"Recorded {where}.",
        "",
        f"- code: git `{commit}`{' (uncommitted changes)' if prov.get('git_dirty') else ''}"
        if commit
        else "- code: not a git checkout",
        f"- created: {prov.get('created')}",
    ]
    pkgs = {k: v for k, v in (prov.get("packages") or {}).items() if v}
    if pkgs:
        lines.append("- packages: " + ", ".join(f"{k} {v}" for k, v in sorted(pkgs.items())))
    for d in prov.get("datasets") or []:
        if isinstance(d, dict):
            rev = f", revision {d['revision']}" if d.get("revision") else ""
            sha = str(d.get("sha256") or "")[:16]
            lines.append(f"- data: {d.get('name')} from {d.get('source')}{rev}, sha256 {sha}…, {d.get('rows')} rows")
    hw = prov.get("hardware")
    if isinstance(hw, dict) and hw:
        lines.append("- hardware: " + ", ".join(f"{k} {v}" for k, v in hw.items() if v not in (None, "", [])))
    return lines


def card_text(cfg, result: dict | None, run_dir=None, step=None) -> str:
    """The card's Markdown (``write_model_card`` writes it)."""
    from harness.run.records import task_label

    res = result or {}
    step = step if step is not None else res.get("steps")
    method = cfg.method_name
    hparams = {k: v for k, v in cfg.method.items() if k != "name"}
    model = str(cfg.model.name)
    hub = "/" in model and not Path(model).exists() and not model.endswith(".gguf")
    suite = task_label(cfg.task.name)
    tags = ["entropy-harness", "reinforcement-learning", method]
    front = ["---", "library_name: transformers", "tags:"] + [f"- {t}" for t in tags]
    front += [f"base_model: {model}"] * hub + ["---", ""]
    title = f"# {method} on {model} ({suite}, seed {cfg.seed}, step {step})"
    run_id = res.get("run_id") or cfg.run_id()
    body = [
        title,
        "",
        f"Exported by entropy-harness from run `{run_id}` ({cfg.backend} backend"
        + (f", run directory `{Path(run_dir).resolve()}`" if run_dir is not None else "")
        + f"): the policy after step {step} of {cfg.train.steps}, trained with `{method}`"
        + (f" (advantage `{cfg.method.get('advantage')}`)" if cfg.method.get("advantage") else "")
        + f" on task `{cfg.task.name}`.",
        "",
        "## Method",
        "",
        "| hyperparameter | value |",
        "|---|---|",
        *(f"| {k} | {json.dumps(v, default=str)} |" for k, v in sorted(hparams.items())),
        "",
        "## Evaluation",
        "",
    ]
    ev = res.get("eval") if result else _eval_at(run_dir, step)
    table = eval_table(ev)
    if table:
        source = "result.json" if result else f"eval/step_{step}.json (the in-training eval; the run had no result yet)"
        body += table + ["", f"From the run's {source}; values are fractions (avg@k = mean correctness)."]
    else:
        body.append("No evaluation recorded for this step yet.")
    body += [
        "",
        f"Score this directory with `harness eval --model DIR --suites {suite}` (results attach to the run).",
        "",
    ]
    summary = res.get("summary") or {}
    if result:
        body += ["## Training", "", f"- status: {res.get('status')}"]
        if res.get("updates"):
            body.append(f"- policy updates: {res['updates'].get('made')} of {res['updates'].get('expected')} steps")
        for a, b in (("entropy_start", "entropy_end"), ("reward_start", "reward_end")):
            if a in summary:
                body.append(f"- {a.split('_')[0]}: {_fmt(summary.get(a))} -> {_fmt(summary.get(b))}")
        if res.get("wall_time_s") is not None:
            body.append(f"- wall time: {_fmt(float(res['wall_time_s']))} s")
        body.append("")
    if result:
        prov, where = res.get("provenance"), "when the run finished (result.json)"
    else:
        from harness import provenance
        from harness.run.runner import task_datasets

        prov, where = provenance.collect(datasets=task_datasets(cfg)), "at export (the run had no result yet)"
    body += ["## Provenance", "", *_provenance_lines(prov, where), ""]
    body += ["## Config", "", "The run's resolved config (`config.yaml`):", "", "```yaml", cfg.to_yaml().rstrip()]
    body.append("```")
    return "\n".join(front + body) + "\n"


def write_model_card(model_dir, cfg, result: dict | None, run_dir=None, step=None) -> Path:
    """``model_dir/README.md`` (atomic, the umask's mode). ``step``: the exported step when ``result`` is None."""
    from harness.io import atomic_write_text

    return atomic_write_text(Path(model_dir) / CARD_FILE, card_text(cfg, result, run_dir, step))
