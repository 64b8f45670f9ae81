"""Leaderboard: rows (model, method), columns = suites, mean ± 95% CI over seeds, two averages, Δ vs a baseline.

Scores are shown in percent (``metric``: each suite's avg@k, pass@k or maj@k, k = its n_samples; a run's last
evaluation, never a best step): mean ± the half-width of a 95% Student-t confidence interval over seeds (n = 1: no
interval). Δ vs the baseline is the paired (same-seed) difference with its CI when the two rows share at least two
seeds, else Welch's interval. A cell (a block's best vs its runner-up) or a Δ is bold only when its t test
survives Holm's adjustment over every test of the table with at least 5 seeds per arm (harness/results/marks.py);
the printed intervals are per comparison. Runs that finished
with status ``insufficient_updates`` are shown flagged and never ranked or compared. Rows are grouped by
everything that changes what a run measures (steps, budget, task options): runs that differ in such a setting
are separate blocks, named in a ``setting`` column, and never compared. The paper's reference rows keep the
paper's own bolding (highest value; no interval is reported).

Two averages per run, then over seeds:

* ``avg (suites)``  the plain mean of the suite scores;
* ``avg (samples)`` the paper's "Avg.": the mean over all evaluation samples, i.e. suites weighted by
  ``n_problems * n_samples`` (AIME24/AIME25/AMC count 32x in the paper's protocol).

A run's average is missing (never partial) when it lacks a suite that other runs of its task were scored on.
Results of one suite under different protocols (metric, n, temperature, top_p, max_tokens) are refused, or
with ``allow_mixed_protocols`` shown as separate columns and flagged.

Entropy: two more columns, ``H start`` and ``H end``: each run's policy entropy (metrics.jsonl ``entropy``) averaged
over its first / last ``edge_steps(N)`` of N logged steps (harness/run/metrics.py: N // 10, at least 1, at most 5; the
window of result.json's summary and of ``harness mechanism``), then mean ± 95% CI over seeds. They describe a row;
they are never ranked, bolded or compared.

Provenance (harness/provenance.py): runs pooled into one row must have read the same data: a dataset name with
two sha256 values among a row's runs is refused, or with ``allow_mixed_data`` pooled and flagged. Runs written
before provenance was recorded pool as before, named in a note. ``provenance=True`` adds a column: the short git
commit(s) (``+dirty`` when the tree had changes) and a short hash of the row's data.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.run.metrics import (
    ENTROPY_END,
    ENTROPY_START,
    FINISHED,
    INSUFFICIENT_UPDATES,
    STEP,
    SUMMARY_KEYS,  # noqa: F401  (METHOD_ORDER re-exported: plots, the site)
    edge_means,
    method_rank,
)

from . import marks, stats
from .collect import Collection, final_evals
from .reference import PAPER_DISPLAY, PAPER_SUITES, canonical_suite, load_protocol, load_reference

SCALE = 100.0  # eval metrics are fractions; tables show percent (the paper's unit)
AVG_COLS = ["avg_suites", "avg_samples"]
AVG_TITLES = {"avg_suites": "avg (suites)", "avg_samples": "avg (samples)"}
DELTA_TITLES = {"avg_suites": "Δ avg (suites)", "avg_samples": "Δ avg (samples)"}
FLAG_INSUFFICIENT = INSUFFICIENT_UPDATES
ENTROPY_COLS = [ENTROPY_START, ENTROPY_END]  # per run: the one start / end window of harness/run/metrics.py
ENTROPY_TITLES = {ENTROPY_START: "H start", ENTROPY_END: "H end"}
BLOCK = ["source", "model", "task", "setting"]
METRICS = {  # --metric: each suite's ``<name>@<k>``, k = the suite's n_samples (docs/evals.md, Metrics)
    "avg": "avg@k: mean accuracy over the k samples of a problem, then over problems (verl's mean@N)",
    "pass": "pass@k: unbiased 1 − C(n−c,k)/C(n,k) with k = n (not verl's best@N bootstrap)",
    "maj": "maj@k: majority vote over answer-equivalence classes of the k samples (not verl's maj@N bootstrap)",
}


@dataclass
class Leaderboard:
    rows: pd.DataFrame  # one row per (source, model, task, setting, method, flag); <col>_mean/_ci/_std/_n,
    # delta_<avg>(_ci), best
    columns: list[str]  # suite columns, then the two averages
    notes: list[str] = field(default_factory=list)
    show_task: bool = False
    baseline: str | None = None
    show_setting: bool = False
    show_provenance: bool = False
    show_entropy: bool = False  # the H start / H end columns (some run row has an entropy)
    metric: str = "avg"  # the suites' metric family shown (METRICS)
    marks: marks.Family | None = None  # the table's tests and what they marked


def _pick_metric(ev: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Each result's ``<metric>@<k>`` (k = its n_samples) as ``metric``/``value``/``stderr``; a suite lacking it in
    some run is refused, naming the metrics its results hold."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    keys, values, errs, lacking = [], [], [], {}
    for _, r in ev.iterrows():
        held = json.loads(r["metrics"]) if isinstance(r.get("metrics"), str) else {}
        n = r["n_samples"]
        key = f"{metric}@{int(n)}" if isinstance(n, (int, float)) and not pd.isna(n) else None
        if str(r["metric"]).startswith(f"{metric}@"):
            key = str(r["metric"])  # the primary, when it is this metric (avg@k for every writer here)
        if key is None or key not in held:
            lacking.setdefault(str(r["suite"]), []).append((r["run_dir"], key, held))
            key = None
        keys.append(key)
        v = held.get(key) if key else None
        se = held.get(f"{key}_stderr") if key else None
        values.append(float(v) if isinstance(v, (int, float)) else math.nan)
        errs.append(float(se) if isinstance(se, (int, float)) else math.nan)
    if lacking:
        suite, runs = next(iter(sorted(lacking.items())))
        run_dir, key, held = runs[0]
        have = sorted(k for k in held if not k.endswith("_stderr"))
        families = sorted({k.split("@")[0] for k in have if k.split("@")[0] in METRICS})
        raise ValueError(
            f"--metric {metric}: suite {suite!r} has no {key or metric + '@k'} in {len(runs)} run(s), e.g. "
            f"{run_dir}; its results hold {', '.join(have) or 'no metric'} (--metric "
            f"{' or '.join(families) or '?'} there)"
        )
    return ev.assign(metric=keys, value=values, stderr=errs)


def run_scores(
    col: Collection, allow_mixed_protocols: bool = False, metric: str = "avg"
) -> tuple[pd.DataFrame, list[str]]:
    """Each completed run's final score per suite (percent) in ``metric`` (METRICS), after the protocol check."""
    ev = final_evals(col).copy()
    notes: list[str] = []
    if ev.empty:
        return ev.assign(column=[]), notes
    if "metrics" in ev:
        ev = _pick_metric(ev, metric)
    ev["suite"] = ev["suite"].map(canonical_suite)
    ev["value"] = ev["value"] * SCALE
    ev["stderr"] = ev["stderr"] * SCALE
    ev["tag"] = ev["metric"].astype(str) + " | " + ev["protocol"]
    ev["column"] = ev["suite"]
    for suite, grp in ev.groupby("suite"):
        tags = grp.groupby("tag")["run_dir"].apply(list)
        if len(tags) == 1:
            notes.append(f"protocol {suite}: {tags.index[0]}")
            continue
        detail = "; ".join(f"[{t}] in {len(r)} run(s), e.g. {r[0]}" for t, r in tags.items())
        if not allow_mixed_protocols:
            raise ValueError(
                f"suite {suite!r} was evaluated under {len(tags)} different protocols: {detail}. "
                "These are never averaged together; re-evaluate with one protocol, or pass "
                "--allow-mixed-protocols to show each protocol as its own column"
            )
        ev.loc[grp.index, "column"] = suite + " [" + grp["tag"] + "]"
        notes.append(f"FLAG: {suite} has {len(tags)} protocols, shown as separate columns: {detail}")
    return ev, notes


def _run_averages(ev: pd.DataFrame) -> pd.DataFrame:
    """Per run: plain and sample-weighted mean over its task's suite columns (NaN if one is missing), and their
    standard errors from the suites' own (independent problem sets): √Σse²/m and √Σ(w·se)²/Σw."""
    task_cols = ev.groupby(ev["task"].astype(str))["column"].apply(lambda s: sorted(set(s))).to_dict()
    out = []
    for run_dir, grp in ev.groupby("run_dir"):
        cols = task_cols[str(grp["task"].iloc[0])]
        by = grp.set_index("column")
        vals, se = by["value"].reindex(cols), by["stderr"].reindex(cols)
        w = by["weight"].reindex(cols).astype(float)
        complete = vals.notna().all()
        weighted_ok = complete and w.notna().all() and w.sum() > 0
        has_se = complete and se.notna().all()
        plain = float(vals.mean()) if complete else math.nan
        weighted = float((vals * w).sum() / w.sum()) if weighted_ok else math.nan
        out.append(
            {
                "run_dir": run_dir,
                "avg_suites": plain,
                "avg_samples": weighted,
                SE + "avg_suites": float(np.sqrt((se**2).sum()) / len(cols)) if has_se else math.nan,
                SE + "avg_samples": float(np.sqrt(((w * se) ** 2).sum()) / w.sum())
                if has_se and weighted_ok
                else math.nan,
            }
        )
    return pd.DataFrame(out)


def run_summary(col: Collection) -> pd.DataFrame:
    """Per finished run (index ``run_dir``): result.json's summary recomputed from its metrics.jsonl rows in file
    order: ``entropy_start/end`` and ``reward_start/end``, the means over the first / last ``edge_steps(N)`` of its
    N logged steps (harness/run/metrics.py); NaN where the run logged no such value."""
    m = col.metrics
    m = m[m["status"].isin(FINISHED) & m[STEP].notna()] if STEP in m.columns and "status" in m.columns else m.iloc[:0]
    cols = [k for pair in SUMMARY_KEYS.values() for k in pair]
    out = {}
    for run_dir, grp in m.groupby("run_dir", sort=False):
        row = {}
        for key, (start, end) in SUMMARY_KEYS.items():
            vals = [None if pd.isna(v) else float(v) for v in grp[key]] if key in grp else [None] * len(grp)
            first, last = edge_means(vals)
            row[start], row[end] = (math.nan if v is None else v for v in (first, last))
        out[run_dir] = row
    return pd.DataFrame.from_dict(out, orient="index", columns=cols, dtype=float)


def run_entropy(col: Collection) -> pd.DataFrame:
    """Per finished run: ``entropy_start`` / ``entropy_end`` of :func:`run_summary`."""
    return run_summary(col)[ENTROPY_COLS]


def _seed(s) -> str:
    return str(int(s)) if isinstance(s, float) and s.is_integer() else str(s)


def _stats(values: pd.Series) -> tuple[float, float, float, int]:
    """mean, 95% Student-t half-width, sample std, n."""
    v = values.dropna().astype(float)
    iv = stats.mean_ci(v)
    std = float(v.std(ddof=1)) if iv.n > 1 else math.nan
    return iv.mean, iv.half, std, iv.n


SE = "se::"  # per-run columns of _per_run holding a score's standard error over problems (the eval's own)
ROW_KEYS = ["model", "task", "setting", "label", "flag"]  # the runs pooled into one leaderboard row


def build_leaderboard(
    col: Collection | None,
    baseline: str | None = None,
    reference: str | None = None,
    allow_mixed_protocols: bool = False,
    allow_mixed_data: bool = False,
    provenance: bool = False,
    imports: list | None = None,
    metric: str = "avg",
) -> Leaderboard:
    """Aggregate runs (and optionally the paper's Table 2, and models scored by lm-eval: ``imports`` = their
    results JSON files) into a :class:`Leaderboard` of the suites' ``metric`` (METRICS; k from each suite's
    protocol)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    if metric != "avg" and (reference or imports):
        what = "--reference paper (the paper's Table 2 reports avg@k)" if reference else "--import-lm-eval"
        raise ValueError(f"--metric {metric}: {what} has avg@k only; use --metric avg with it")
    rows: list[dict] = []
    notes: list[str] = []
    suite_cols: list[str] = []
    ev = None
    if col is not None:
        ev, rows, notes, suite_cols = _runs_rows(col, allow_mixed_protocols, allow_mixed_data, metric)
    if reference:
        ref_rows, ref_notes = _reference_rows(reference)
        rows += ref_rows
        notes += ref_notes
        if col is not None:
            notes += _protocol_vs_paper(ev)
        for s in PAPER_SUITES:
            if s not in suite_cols:
                suite_cols.append(s)
    if imports:
        imp_rows, imp_notes = _imported_rows(imports, ev)
        rows += imp_rows
        notes += imp_notes
        for r in imp_rows:
            suite_cols += [c for c in r["task_suites"].split(";") if c not in suite_cols]
    lb = _leaderboard(rows, suite_cols, notes, baseline, provenance)
    lb.metric = metric
    return lb


def _runs_rows(col: Collection, allow_mixed_protocols: bool, allow_mixed_data: bool, metric: str = "avg"):
    """The rows of the runs (one per ``ROW_KEYS``, its stats over seeds) and their notes: (the runs' scores,
    rows, notes, suite columns)."""
    ev, proto_notes = run_scores(col, allow_mixed_protocols, metric)
    if ev.empty:
        raise ValueError(
            "no completed run has eval results (result.json 'eval'); nothing to tabulate. " + _missing_text(col)
        )
    per_run, notes = _per_run(col, ev)
    suite_cols = sorted(ev["column"].unique(), key=_column_order)
    task_cols = ev.groupby(ev["task"].astype(str))["column"].apply(lambda s: ";".join(sorted(set(s)))).to_dict()
    data_notes = _check_data(per_run, ROW_KEYS, allow_mixed_data)
    rows = []
    for key, grp in per_run.groupby(ROW_KEYS, dropna=False):
        rows.append(_runs_row(key, grp, suite_cols, task_cols))
        if grp["seed"].dropna().duplicated().any():
            model, label = key[0], key[3]
            notes.append(
                f"FLAG: {model} {label} has several runs with the same seed "
                f"({', '.join(sorted(grp.index))}); each counts in n"
            )
    notes += _runs_notes(per_run, metric) + _step_notes(col, ev) + proto_notes + data_notes
    missing = _missing_text(col)
    if missing:
        notes.append(missing)
    no_eval = sorted(set(col.completed["run_dir"]) - set(ev["run_dir"]))
    if no_eval:
        notes.append(f"NO EVAL: {len(no_eval)} completed run(s) have no eval results, left out: " + "; ".join(no_eval))
    return ev, rows, notes, suite_cols


def _per_run(col: Collection, ev: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One row per run (index run_dir): its suite scores, averages, entropy window, identity and flag; and a
    note for each null score (left out of its column's n)."""
    avgs = _run_averages(ev)
    per_run = ev.pivot_table(index="run_dir", columns="column", values="value", aggfunc="first")
    se = ev.pivot_table(index="run_dir", columns="column", values="stderr", aggfunc="first")
    per_run = per_run.join(se.add_prefix(SE)).join(avgs.set_index("run_dir")).join(run_entropy(col))
    ident = col.runs.set_index("run_dir")[
        ["model", "model_params", "task", "setting", "label", "seed", "status", *PROVENANCE_COLS]
    ]
    per_run = per_run.join(ident)
    per_run["flag"] = np.where(per_run["status"] == FLAG_INSUFFICIENT, FLAG_INSUFFICIENT, "")
    notes = []
    for _, r in ev[ev["value"].isna()].iterrows():  # a null score is left out of n, and said
        who = ident.loc[r["run_dir"]]
        notes.append(
            f"MISSING: {who['model']} {who['label']} seed {_seed(who['seed'])} has no {r['column']} "
            f"score (null in its results: {r['run_dir']}); that column's n leaves it out"
        )
    return per_run, notes


def _runs_row(key: tuple, grp: pd.DataFrame, suite_cols: list[str], task_cols: dict) -> dict:
    """The leaderboard row of the runs ``grp`` (one ``ROW_KEYS`` value): mean, CI, std and n of each column."""
    model, task, setting, label, flag = key
    row = {
        "source": "runs",
        "model": model,
        "model_params": grp["model_params"].max(),
        "task": task,
        "setting": setting,
        "method": label,
        "flag": flag,
        "seeds": ",".join(_seed(s) for s in sorted(grp["seed"].dropna().unique())),
        "task_suites": task_cols.get(str(task), ""),
        "provenance": provenance_text(grp),
        "_by_seed": {
            c: {_seed(s): float(v) for s, v in zip(grp["seed"], grp[c]) if pd.notna(v)} for c in suite_cols + AVG_COLS
        },
    }
    for c in suite_cols + AVG_COLS + ENTROPY_COLS:
        row[f"{c}_mean"], row[f"{c}_ci"], row[f"{c}_std"], row[f"{c}_n"] = _stats(grp[c])
    for c in suite_cols + AVG_COLS:  # the eval's own standard error over problems, mean over the row's runs
        errs = grp[SE + c].dropna() if SE + c in grp else ()
        row[f"{c}_se"] = float(np.mean(errs)) if len(errs) else math.nan
    return row


def scores_note(metric: str) -> str:
    """The notes line saying what a cell and a Δ are (the marks: marks.note)."""
    return (
        f"Metric: {METRICS[metric]}. "
        "Scores in percent: mean ± half-width of the 95% Student-t CI over seeds (n = seeds with a "
        "value; no ± when n = 1). Δ = paired same-seed difference ± its 95% CI (Welch's interval when "
        "seeds do not match); bold: see MARKS. "
        "avg (suites) = plain mean of suites; avg (samples) = mean over all evaluation samples "
        "(suite weight n_problems × n_samples), as the paper's Avg. The csv's <col>_se is each run's own "
        "standard error over problems (the eval's <metric>_stderr), mean over the row's runs"
    )


STEP_NOTE = (
    "STEP: last step: each run's final evaluation (result.json's eval, else its last eval/step_N.json); no "
    "best-step selection anywhere"
)


def _step_notes(col: Collection, ev: pd.DataFrame) -> list[str]:
    """Which step a score is from: every run's last evaluation (never a best step); a run whose last evaluation
    is before its last training step is named."""
    early = []
    steps = col.runs.set_index("run_dir")["steps"]
    for run_dir, step in ev.groupby("run_dir")["step"].max().items():
        last = pd.to_numeric(pd.Series([steps.get(run_dir)]), errors="coerce").iloc[0]
        if pd.notna(step) and pd.notna(last) and float(step) < float(last):
            early.append(f"{run_dir} (step {int(step)} of {int(last)})")
    out = [STEP_NOTE]
    if early:
        out.append(
            f"STEP: {len(early)} run(s) have no evaluation at their last training step; scored at their last "
            "evaluated step: " + "; ".join(early)
        )
    return out


def _runs_notes(per_run: pd.DataFrame, metric: str = "avg") -> list[str]:
    """What the runs' rows need said: flagged runs, settings blocks, n = 1, how to read the cells, the entropy."""
    notes = []
    if (per_run["flag"] == FLAG_INSUFFICIENT).any():
        bad = sorted(per_run.index[per_run["flag"] == FLAG_INSUFFICIENT])
        notes.append(
            f"FLAG: {len(bad)} run(s) finished with status insufficient_updates (fewer than half "
            "the expected policy updates): shown flagged, never ranked or compared: " + "; ".join(bad)
        )
    settings = sorted({s for s in per_run["setting"] if s})
    if settings:
        notes.append(
            "FLAG: runs of one model and task differ in settings that change what they measure; "
            "each setting is its own block, never compared with another: " + " | ".join(settings)
        )
    seeds_per_row = per_run["avg_suites"].notna().groupby([per_run[k] for k in ROW_KEYS]).sum()
    if int(pd.to_numeric(seeds_per_row, errors="coerce").max() or 0) <= 1:
        notes.append("n = 1: one seed per row, so no interval; nothing is marked better than anything else")
    notes.append(scores_note(metric))
    if per_run[ENTROPY_COLS].notna().any().any():
        notes.append(
            "H start / H end: policy entropy (metrics.jsonl entropy, nats per token) averaged over each run's "
            "first / last edge_steps(N) of its N logged steps (N // 10, at least 1, at most 5: "
            "harness/run/metrics.py, as result.json's summary), mean ± 95% CI over seeds; never ranked"
        )
    return notes


def _leaderboard(rows: list[dict], suite_cols: list[str], notes: list[str], baseline, provenance: bool) -> Leaderboard:
    """The rows as a table with the Δ columns, the best cells marked, sorted, and what it shows."""
    table = pd.DataFrame(rows)
    for k, default in (("setting", ""), ("flag", ""), ("_by_seed", None), ("provenance", "")):
        if k not in table:
            table[k] = default
    table["setting"] = table["setting"].fillna("")
    table["flag"] = table["flag"].fillna("")
    table["provenance"] = table["provenance"].fillna("")
    runs_only = table[table["source"] == "runs"] if not table.empty else table
    show_task = bool(len(runs_only)) and runs_only["task"].nunique(dropna=False) > 1
    show_setting = bool(len(runs_only)) and bool((runs_only["setting"] != "").any())
    baseline = _check_baseline(table, baseline)
    comparisons = _add_deltas(table, baseline) + _mark_best(table, suite_cols + AVG_COLS)
    family = _apply_marks(table, comparisons, suite_cols + AVG_COLS)
    if family.comparisons or (not table.empty and (table["source"] == "runs").any()):
        at = next((i + 1 for i, n in enumerate(notes) if n.startswith("Metric:")), len(notes))
        notes = notes[:at] + [marks.note(family)] + notes[at:]
    table = _sort(table, baseline)
    show_entropy = bool(len(runs_only)) and all(f"{c}_mean" in table for c in ENTROPY_COLS)
    show_entropy = show_entropy and bool(table[[f"{c}_mean" for c in ENTROPY_COLS]].notna().any().any())
    return Leaderboard(
        rows=table,
        columns=suite_cols + AVG_COLS,
        notes=notes,
        show_task=show_task,
        baseline=baseline,
        show_setting=show_setting,
        show_provenance=provenance,
        show_entropy=show_entropy,
        marks=family,
    )


def _apply_marks(table: pd.DataFrame, comparisons: list, columns: list[str]) -> marks.Family:
    """Test every comparison under the table's one family-wise rule (harness/results/marks.py) and write its
    p values and marks: ``delta_<avg>_p``, ``_p_holm``, ``_marked``; ``<col>_p_runner_up``, ``_p_runner_up_holm``
    on a block's top row, and ``best`` = the columns whose best-vs-runner-up test is marked."""
    family = marks.decide(comparisons)
    for a in AVG_COLS:
        table[f"delta_{a}_p"] = math.nan
        table[f"delta_{a}_p_holm"] = math.nan
        table[f"delta_{a}_marked"] = False
    for c in columns:
        table[f"{c}_p_runner_up"] = math.nan
        table[f"{c}_p_runner_up_holm"] = math.nan
    for cmp in family.comparisons:
        if cmp.kind == "delta":
            table.loc[cmp.row, f"delta_{cmp.col}_p"] = cmp.p
            table.loc[cmp.row, f"delta_{cmp.col}_p_holm"] = cmp.p_holm
            table.loc[cmp.row, f"delta_{cmp.col}_marked"] = cmp.marked
        else:
            table.loc[cmp.row, f"{cmp.col}_p_runner_up"] = cmp.p
            table.loc[cmp.row, f"{cmp.col}_p_runner_up_holm"] = cmp.p_holm
            if cmp.marked:
                table.loc[cmp.row, "best"] = ";".join(filter(None, [table.at[cmp.row, "best"], cmp.col]))
    table["mark_rule"] = marks.rule(family)
    return family


PROVENANCE_COLS = ["git_commit", "git_dirty", "datasets"]


def _check_data(per_run: pd.DataFrame, keys: list[str], allow_mixed: bool) -> list[str]:
    """Refuse (or with ``allow_mixed`` flag) rows pooling runs that read one dataset name in different versions;
    note the runs without provenance."""
    conflicts = []
    for key, grp in per_run.groupby(keys, dropna=False):
        versions: dict[str, dict[str, list[str]]] = {}
        for run_dir, data in grp["datasets"].items():
            if isinstance(data, str):
                for name, sha in json.loads(data).items():
                    versions.setdefault(name, {}).setdefault(sha, []).append(str(run_dir))
        for name, by_sha in sorted(versions.items()):
            if len(by_sha) > 1:
                runs = "; ".join(f"sha256 {sha[:12]} in {', '.join(sorted(r))}" for sha, r in sorted(by_sha.items()))
                conflicts.append(f"{key[0]} {key[3]}: dataset {name!r} in {len(by_sha)} versions ({runs})")
    notes = []
    across = []  # rows of one block (compared by Δ and bolding) that read different versions
    for key, grp in per_run.groupby(["model", "task", "setting"], dropna=False):
        versions = {}
        for run_dir, data in grp["datasets"].items():
            if isinstance(data, str):
                for name, sha in json.loads(data).items():
                    versions.setdefault(name, {}).setdefault(sha, set()).add(str(grp.at[run_dir, "label"]))
        for name, by_sha in sorted(versions.items()):
            if len(by_sha) > 1:
                rows = "; ".join(f"{sha[:12]}: {', '.join(sorted(m))}" for sha, m in sorted(by_sha.items()))
                across.append(f"{key[0]}: dataset {name!r} ({rows})")
    if across:
        notes.append(
            "FLAG: rows compared with each other read different data versions, so their differences "
            "include the data's: " + " | ".join(across)
        )
    if conflicts and not allow_mixed:
        raise ValueError(
            "runs pooled into one row read different data: "
            + " | ".join(conflicts)
            + ". Their scores are not seeds of one experiment; re-run them on one data version, or "
            "pass --allow-mixed-data to pool them anyway (flagged)"
        )
    if conflicts:
        notes.append("FLAG: rows pool runs that read different data (--allow-mixed-data): " + " | ".join(conflicts))
    unrecorded = sorted(str(r) for r, d in per_run["datasets"].items() if not isinstance(d, str))
    if unrecorded:
        notes.append(
            f"PROVENANCE: {len(unrecorded)} of {len(per_run)} run(s) carry no provenance (written before it "
            "was recorded): their data versions cannot be checked; pooled as before: " + "; ".join(unrecorded)
        )
    return notes


def provenance_text(grp: pd.DataFrame) -> str:
    """``git 1a2b3c4+dirty · data 9f8e7d6c`` for a row's runs: each distinct short commit, and per distinct data
    set the dataset's sha256 (several datasets: the sha256 of their sorted ``name=sha256`` lines), 8 hex."""
    commits = []
    for c, dirty in zip(grp["git_commit"], grp["git_dirty"]):
        if isinstance(c, str):
            commits.append(c[:7] + ("+dirty" if isinstance(dirty, (bool, np.bool_)) and dirty else ""))
    data = []
    for d in grp["datasets"]:
        if isinstance(d, str) and json.loads(d):
            m = json.loads(d)
            if len(m) == 1:
                data.append(next(iter(m.values()))[:8])
            else:
                lines = "".join(f"{k}={v}\n" for k, v in sorted(m.items()))
                data.append(hashlib.sha256(lines.encode()).hexdigest()[:8])
    parts = [
        f"git {', '.join(dict.fromkeys(sorted(commits)))}" if commits else "",
        f"data {', '.join(dict.fromkeys(sorted(data)))}" if data else "",
    ]
    missing = int(sum(not isinstance(d, str) for d in grp["datasets"]))
    if missing:
        parts.append(f"{missing} run(s) unrecorded")
    return " · ".join(p for p in parts if p) or "—"


def _column_order(c: str):
    base = c.split(" [")[0]
    return (PAPER_SUITES.index(base) if base in PAPER_SUITES else len(PAPER_SUITES), c)


def _missing_text(col: Collection) -> str:
    bad = col.not_completed
    if bad.empty:
        return ""
    items = "; ".join(f"{r.run_dir} ({r.detail})" for r in bad.itertuples())
    return f"MISSING: {len(bad)} run(s) not completed, left out (not counted as 0): {items}"


def _reference_rows(name: str) -> tuple[list[dict], list[str]]:
    ref = load_reference(name)
    proto = load_protocol().set_index("suite")
    weights = proto["eval_rows"].reindex(PAPER_SUITES).astype(float)
    rows = []
    for r in ref.itertuples(index=False):
        r = r._asdict()
        row = {
            "source": name,
            "model": r["model"],
            "model_params": r["model_params"],
            "task": "paper",
            "method": r["method"],
            "seeds": "",
            "task_suites": ";".join(PAPER_SUITES),
        }
        for s in PAPER_SUITES:
            row[f"{s}_mean"], row[f"{s}_std"], row[f"{s}_n"] = float(r[s]), math.nan, math.nan
            row[f"{s}_ci"] = math.nan
        vals = np.array([r[s] for s in PAPER_SUITES], dtype=float)
        row["avg_suites_mean"] = float(vals.mean())
        row["avg_samples_mean"] = float(r["avg"])
        for a in AVG_COLS:
            row[f"{a}_std"], row[f"{a}_n"], row[f"{a}_ci"] = math.nan, math.nan, math.nan
        rows.append(row)
    note = (
        f"REFERENCE ({name}): Cui et al. 2025 Table 2 as reported, not re-run here (results/reference/). "
        "Its avg (samples) is the paper's Avg.; its avg (suites) is computed here from the 7 columns. "
        "Paper suite weights (evaluation rows): " + ", ".join(f"{s}={int(w)}" for s, w in weights.items())
    )
    return rows, [note]


IMPORTED = "lm-eval"  # the source of rows read from lm-eval results files


def _imported_rows(paths, ev: pd.DataFrame | None) -> tuple[list[dict], list[str]]:
    """One row per lm-eval results file: its own source, so never pooled with runs, never in a block with them (no
    Δ, no bold); its protocol in the notes (and the csv), flagged where it differs from the runs' in a column."""
    from .lm_eval_import import read_lm_eval

    ours: dict[str, set] = {}
    if ev is not None and not ev.empty:
        for c, grp in ev.groupby("column"):
            ours[c] = {
                _protocol_key(r)
                for r in grp[["n_problems", "n_samples", "temperature", "top_p", "max_tokens"]].to_dict("records")
            }
    rows, notes = [], []
    for path in paths:
        m = read_lm_eval(path)
        row = {
            "source": IMPORTED,
            "model": m.model,
            "model_params": math.nan,
            "task": IMPORTED,
            "setting": "",
            "method": f"lm-eval ({Path(m.path).name})",
            "flag": "",
            "seeds": "",
        }
        cols: list[str] = []
        for t in m.tasks:
            if t.column in cols:
                notes.append(f"FLAG: {m.path}: task {t.task} fills column {t.column} again; the first is shown")
                continue
            cols.append(t.column)
            row[f"{t.column}_mean"] = t.value * SCALE
            row[f"{t.column}_ci"] = row[f"{t.column}_std"] = row[f"{t.column}_n"] = math.nan
            key = _protocol_key(t.protocol)
            if t.column in ours and key not in ours[t.column]:
                notes.append(
                    f"FLAG: {m.model} (lm-eval) {t.column} protocol ({t.protocol_text()}) differs from the "
                    "runs' in that column: the scores are not directly comparable"
                )
        for a in AVG_COLS:
            row[f"{a}_mean"] = row[f"{a}_ci"] = row[f"{a}_std"] = row[f"{a}_n"] = math.nan
        row["task_suites"] = ";".join(cols)
        row["protocol"] = " | ".join(f"{t.column}: {t.protocol_text()}" for t in m.tasks if t.column in cols)
        rows.append(row)
        version = f" {m.lm_eval_version}" if m.lm_eval_version else ""
        notes.append(
            f"IMPORTED (lm-eval{version}): {m.path}: {m.model} scored by lm-evaluation-harness, not by this "
            "harness: its own row, never pooled with runs nor compared with them (no Δ, no bold, no "
            f"averages); score × 100. Protocol: {row['protocol']}"
            + (f". Skipped: {'; '.join(m.skipped)}" if m.skipped else "")
        )
    return rows, notes


def _protocol_key(p: dict) -> tuple:
    """(problems, samples, temperature, top_p, max_tokens) as numbers, so 0 and 0.0 compare equal."""
    out = []
    for k in ("n_problems", "n_samples", "temperature", "top_p", "max_tokens"):
        try:
            out.append(float(p.get(k)))
        except (TypeError, ValueError):
            out.append(None)
    return tuple(out)


def _protocol_vs_paper(ev: pd.DataFrame) -> list[str]:
    """A note for every run suite that is one of the paper's but was evaluated under another protocol."""
    proto = load_protocol().set_index("suite")
    out = []
    for suite, grp in ev.groupby("suite"):
        if suite not in proto.index:
            continue
        p = proto.loc[suite]
        want = (int(p["n_problems"]), int(p["n_samples"]), float(p["temperature"]), int(p["max_tokens"]))
        for _, r in grp.drop_duplicates("protocol").iterrows():
            got = tuple(r[k] for k in ("n_problems", "n_samples", "temperature", "max_tokens"))
            try:
                same = (int(got[0]), int(got[1]), float(got[2]), int(got[3])) == want
            except (TypeError, ValueError):
                same = False
            if not same:
                out.append(
                    f"FLAG: runs' {suite} protocol ({r['protocol']}) differs from the paper's "
                    f"(problems={want[0]},n={want[1]},T={want[2]},max_tokens={want[3]}): "
                    "the columns are not directly comparable"
                )
    return out


def _check_baseline(table: pd.DataFrame, baseline: str | None) -> str | None:
    methods = sorted(table["method"].astype(str).unique()) if not table.empty else []
    if baseline is None:
        return "grpo" if "grpo" in methods else None
    if baseline not in methods:
        raise ValueError(f"baseline method {baseline!r} is not in the table; methods present: {', '.join(methods)}")
    return baseline


def _seed_values(row: pd.Series, c: str) -> dict:
    by = row.get("_by_seed")
    return dict(by.get(c, {})) if isinstance(by, dict) else {}


def _ranked(grp: pd.DataFrame) -> pd.DataFrame:
    return grp[grp["flag"].fillna("") == ""]


def _add_deltas(table: pd.DataFrame, baseline: str | None) -> list[marks.Comparison]:
    """Δ vs the baseline row of the same block: paired difference (Welch when seeds do not match) ± its CI; returns
    the comparisons a mark could go on (runs rows; harness/results/marks.py decides)."""
    out: list[marks.Comparison] = []
    for a in AVG_COLS:
        table[f"delta_{a}"] = math.nan
        table[f"delta_{a}_ci"] = math.nan
        table[f"delta_{a}_paired"] = False
    if baseline is None or table.empty:
        return out
    for (source, *_), grp in table.groupby(BLOCK, dropna=False):
        ok = _ranked(grp)
        base = ok[ok["method"] == baseline]
        if base.empty:
            continue
        b = base.iloc[0]
        for i in ok.index:
            for a in AVG_COLS:
                if source != "runs":
                    table.loc[i, f"delta_{a}"] = table.at[i, f"{a}_mean"] - b[f"{a}_mean"]
                    continue
                if i == base.index[0]:
                    table.loc[i, f"delta_{a}"] = 0.0 if pd.notna(b[f"{a}_mean"]) else math.nan
                    continue
                mine, theirs = _seed_values(table.loc[i], a), _seed_values(b, a)
                iv = stats.difference(mine, theirs)
                table.loc[i, f"delta_{a}"] = iv.mean
                table.loc[i, f"delta_{a}_ci"] = iv.half
                table.loc[i, f"delta_{a}_paired"] = iv.paired
                out.append(marks.Comparison("delta", i, base.index[0], a, mine, theirs))
    return out


def _mark_best(table: pd.DataFrame, columns: list[str]) -> list[marks.Comparison]:
    """Reference rows (the paper's) keep the paper's convention in ``best``: the highest value. For runs, returns
    each block's top row vs its runner-up per column (flagged rows are never ranked): ``best`` is filled by
    :func:`_apply_marks` where that test is marked."""
    out: list[marks.Comparison] = []
    best: dict[int, list[str]] = {i: [] for i in table.index}
    for (source, *_), grp in table.groupby(BLOCK, dropna=False):
        grp = _ranked(grp)
        if len(grp) < 2:
            continue
        for c in columns:
            vals = grp[f"{c}_mean"].dropna()
            if len(vals) < 2:
                continue
            order = vals.sort_values(ascending=False)
            top, runner = order.index[0], order.index[1]
            if source != "runs":
                for i in order.index[np.isclose(order.values, order.iloc[0])]:
                    best[i].append(c)
                continue
            mine, theirs = _seed_values(table.loc[top], c), _seed_values(table.loc[runner], c)
            out.append(marks.Comparison("best", top, runner, c, mine, theirs))
    table["best"] = [";".join(best[i]) for i in table.index]
    return out


def _sort(table: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    if table.empty:
        return table
    t = table.assign(
        _src=(table["source"] != "runs").astype(int),
        _size=table["model_params"].fillna(np.inf),
        _base=(table["method"] != baseline).astype(int),
        _order=[method_rank(m) for m in table["method"].astype(str).str.split("[+(]").str[0]],
    )
    return (
        t.sort_values(["_src", "_size", "model", "task", "setting", "_base", "_order", "method", "flag"])
        .drop(columns=["_src", "_size", "_base", "_order"])
        .reset_index(drop=True)
    )


# ---------------------------------------------------------------- formatting


def _cell(row: pd.Series, c: str) -> str:
    mean, ci, n = row[f"{c}_mean"], row[f"{c}_ci"], row[f"{c}_n"]
    if pd.isna(mean):  # "—" = missing for a suite this row's task is scored on; blank = not applicable
        scored = c in str(row.get("task_suites", "")).split(";")
        return "—" if scored or (c in AVG_COLS and row["source"] != IMPORTED) else ""
    text = f"{mean:.1f}"
    if row["source"] == "runs":
        text += (f" ± {ci:.1f}" if pd.notna(ci) else "") + f" (n={int(n)})"
    return text


def _entropy_cell(row: pd.Series, c: str) -> str:
    """``0.412 ± 0.031 (n=3)`` (nats per token); "—" for a run row without an entropy, blank for other rows."""
    mean, ci, n = row.get(f"{c}_mean", math.nan), row.get(f"{c}_ci", math.nan), row.get(f"{c}_n", math.nan)
    if row["source"] != "runs":
        return ""
    if pd.isna(mean):
        return "—"
    return f"{mean:.3f}" + (f" ± {ci:.3f}" if pd.notna(ci) else "") + f" (n={int(n)})"


def _delta(row: pd.Series, a: str, bold) -> str:
    v, ci = row[f"delta_{a}"], row.get(f"delta_{a}_ci", math.nan)
    if pd.isna(v):
        return ""
    text = f"{v:+.1f}"
    if pd.notna(ci):
        text += f" ± {ci:.1f}" + ("" if row.get(f"delta_{a}_paired", True) else " (unpaired)")
    return bold(text) if marked(row.get(f"delta_{a}_marked")) else text


def marked(v) -> bool:
    """A csv/record ``*_marked`` value: True, numpy's True or the csv's text "True"; anything else is unmarked."""
    return (isinstance(v, (bool, np.bool_)) and bool(v)) or (isinstance(v, str) and v.strip().lower() == "true")


_KIND = {IMPORTED: "imported"}


def _display(lb: Leaderboard, bold) -> tuple[list[str], list[list[str]]]:
    head = ["model", *(["task"] if lb.show_task else []), *(["setting"] if lb.show_setting else []), "method", "source"]
    head += [AVG_TITLES.get(c, PAPER_DISPLAY.get(c, c)) for c in lb.columns]
    base = lb.baseline or "baseline"
    head += [f"{DELTA_TITLES[a]} vs {base}" for a in AVG_COLS]
    if lb.show_entropy:
        head += [ENTROPY_TITLES[c] for c in ENTROPY_COLS]
    if lb.show_provenance:
        head.append("provenance")
    body = []
    for _, r in lb.rows.iterrows():
        best = set(filter(None, r["best"].split(";")))
        method = str(r["method"]) + (f" [FLAG: {r['flag']}, not ranked]" if r.get("flag") else "")
        line = [
            str(r["model"]),
            *([str(r["task"])] if lb.show_task else []),
            *([str(r["setting"]) or "(default)"] if lb.show_setting else []),
            method,
            "run" if r["source"] == "runs" else f"{r['source']} ({_KIND.get(r['source'], 'reference')})",
        ]
        line += [bold(_cell(r, c)) if c in best else _cell(r, c) for c in lb.columns]
        line += [_delta(r, a, bold) for a in AVG_COLS]
        if lb.show_entropy:
            line += [_entropy_cell(r, c) for c in ENTROPY_COLS]
        if lb.show_provenance:
            line.append(str(r.get("provenance", "")))
        body.append(line)
    return head, body


def to_markdown(lb: Leaderboard) -> str:
    head, body = _display(lb, lambda s: f"**{s}**")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in lb.notes) + ("\n" if lb.notes else "")


def _tex_escape(s: str) -> str:
    for a, b in [
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("±", r"$\pm$"),
        ("Δ", r"$\Delta$"),
        ("—", "--"),
    ]:
        s = s.replace(a, b)
    return s


def to_latex(lb: Leaderboard) -> str:
    head, body = _display(lb, lambda s: "\x00" + s + "\x01")
    esc = lambda s: _tex_escape(s).replace("\x00", r"\textbf{").replace("\x01", "}")  # noqa: E731
    n_left = 3 + int(lb.show_task) + int(lb.show_setting)
    spec = "l" * n_left + "r" * (len(head) - n_left - int(lb.show_provenance)) + "l" * int(lb.show_provenance)
    out = [r"\begin{tabular}{" + spec + "}", r"\toprule", " & ".join(esc(h) for h in head) + r" \\", r"\midrule"]
    out += [" & ".join(esc(c) for c in row) + r" \\" for row in body]
    out += [r"\bottomrule", r"\end{tabular}"]
    out += ["% " + n for n in lb.notes]
    return "\n".join(out) + "\n"


def to_html(lb: Leaderboard) -> str:
    head, body = _display(lb, lambda s: "\x00" + s + "\x01")
    esc = lambda s: html.escape(s).replace("\x00", "<b>").replace("\x01", "</b>")  # noqa: E731
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in body]
    out += ["</tbody>", "</table>"] + [f"<p>{html.escape(n)}</p>" for n in lb.notes]
    return "\n".join(out) + "\n"


def to_csv(lb: Leaderboard) -> str:
    """Machine-readable: one row per (source, model, task, method), numbers unrounded (percent)."""
    keep = ["source", "model", "model_params", "task", "setting", "method", "flag", "seeds"]
    for c in lb.columns:
        keep += [f"{c}_mean", f"{c}_ci", f"{c}_std", f"{c}_n", f"{c}_se"]
    for a in AVG_COLS:
        keep += [f"delta_{a}", f"delta_{a}_ci", f"delta_{a}_paired", f"delta_{a}_p", f"delta_{a}_p_holm"]
        keep += [f"delta_{a}_marked"]
    if lb.show_entropy:
        for c in ENTROPY_COLS:
            keep += [f"{c}_mean", f"{c}_ci", f"{c}_std", f"{c}_n"]
    keep += ["best"] + [f"{c}_p_runner_up{h}" for c in lb.columns for h in ("", "_holm")]
    keep += ["mark_rule", "metric"] + (["provenance"] if lb.show_provenance else [])
    if not lb.rows.empty and (lb.rows["source"] == IMPORTED).any():
        keep.append("protocol")  # an imported row's lm-eval protocol per column
    return lb.rows.assign(metric=lb.metric).reindex(columns=keep).to_csv(index=False, float_format="%.6g")


FORMATS = {"md": to_markdown, "tex": to_latex, "html": to_html, "csv": to_csv}


def render(lb: Leaderboard, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")
    return FORMATS[fmt](lb)
