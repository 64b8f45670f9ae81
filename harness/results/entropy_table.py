"""Entropy and training reward per method, mean ± 95% CI over seeds, and the paired Δ vs a baseline (markdown).

    python -m harness.results.entropy_table RUNS [RUNS ...] [--baseline grpo] > entropy.md

Per finished run, from its metrics.jsonl: the entropy (``entropy``) at its start and end and the training reward
(``reward/mean``) at its end, each the mean over the first / last ``edge_steps(N)`` of its N logged steps
(harness/run/metrics.py: N // 10, at least 1, at most 5; the window of result.json's summary, ``harness table`` and
``harness mechanism``). Rows: methods in ``METHOD_ORDER``; n = runs. Intervals: harness.results.stats (Student t;
Δ paired by seed). A bold Δ: marked by ``harness.results.marks`` (Holm over every Δ of the table, at least 5
seeds per arm), as ``harness table`` marks; the note under the table says so. Runs of different models, tasks or
settings get one table each (methods are compared only within one experiment).
"""

from __future__ import annotations

import argparse
import sys

from harness.run.metrics import ENTROPY_END, ENTROPY_START, REWARD_END, method_rank

from . import marks
from .collect import Collection, collect
from .stats import mean_ci, paired_diff
from .table import run_summary

COLUMNS = {ENTROPY_END: "H end", REWARD_END: "reward end"}


def _fmt(iv, sign: str = "") -> str:
    return f"{iv.mean:{sign}.3f} ± {iv.half:.3f}"


def entropy_table(col: Collection, baseline: str = "grpo") -> str:
    """The markdown table(s): one per (model, task, setting) block, each headed by the block's name when there are
    several (methods are compared only within one experiment), then the mean start entropy over all runs. Two
    passes: every block's comparisons first (one Holm family over the table), then the rows with their marks."""
    runs = col.runs[col.runs["run_dir"].isin(col.completed["run_dir"])].set_index("run_dir")
    per_run = run_summary(col).reindex(runs.index)
    if runs.empty:
        raise ValueError("no completed run; nothing to tabulate")
    blocks = list(runs.groupby(["model", "task", "setting"], dropna=False, sort=True))
    tables, first = [], 0
    for (model, task, setting), grp in blocks:
        head = [f"### {model}, task {task or '?'}" + (f", {setting}" if setting else ""), ""] if len(blocks) > 1 else []
        by = _by_label(grp, per_run)
        tables.append((head, by, _comparisons(by, baseline, first)))
        first += len(tables[-1][2])
    fam = marks.decide([c for *_, comps in tables for c in comps.values()])  # one family: every Δ of every block
    out = []
    for head, by, comps in tables:
        out += head + _rows(by, baseline, comps) + [""]
    starts = [v for _, by, _ in tables for d in by.values() for v in d.get(ENTROPY_START, {}).values()]
    h0 = mean_ci(starts)
    out.append(f"Entropy at the start over all runs: {h0.mean:.3f} ± {h0.half:.3f} (n = {h0.n}).")
    out += ["", marks.note(fam)]
    return "\n".join(out) + "\n"


def _by_label(runs, per_run) -> dict[str, dict[str, dict[int, float]]]:
    """label -> column -> {seed: value}; a run without the value is left out of n, never counted as 0."""
    by: dict[str, dict[str, dict[int, float]]] = {}
    for run_dir, r in runs.iterrows():
        for key in (ENTROPY_START, *COLUMNS):
            v = per_run.at[run_dir, key]
            if v == v:
                by.setdefault(str(r["label"]), {}).setdefault(key, {})[int(r["seed"])] = float(v)
    if not by:
        raise ValueError("no completed run logged entropy or reward/mean; nothing to tabulate")
    return by


def _labels(by: dict) -> list[str]:
    return sorted(by, key=lambda x: (method_rank(x), x))


def _comparisons(by: dict, baseline: str, first: int) -> dict[tuple[str, str], marks.Comparison]:
    """(method, column) -> its paired test against ``baseline``, numbered from ``first`` across the table."""
    if baseline not in by:
        raise ValueError(f"baseline method {baseline!r} has no completed run; methods present: {', '.join(sorted(by))}")
    keys = [(label, k) for label in _labels(by) if label != baseline for k in COLUMNS]
    return {
        (label, k): marks.Comparison("delta", first + i, -1, k, by[label].get(k, {}), by[baseline].get(k, {}))
        for i, (label, k) in enumerate(keys)
    }


def _rows(by: dict, baseline: str, comps: dict) -> list[str]:
    """The block's markdown rows: means with intervals, then the paired Δ (bold when marked)."""
    titles = list(COLUMNS.values())
    lines = [
        "| method | n | "
        + " | ".join(f"{t} (mean ± 95% CI)" for t in titles)
        + " | "
        + " | ".join(f"Δ {t} vs {baseline} (paired)" for t in titles)
        + " |",
        "|---" * (2 + 2 * len(titles)) + "|",
    ]
    for label in _labels(by):
        d = by[label]
        cells = [_fmt(mean_ci(d.get(k, {}).values())) for k in COLUMNS]
        shown = []
        for k in COLUMNS:
            c = comps.get((label, k))
            text = "" if c is None else _fmt(paired_diff(d.get(k, {}), by[baseline].get(k, {})), "+")
            shown.append(f"**{text}**" if c is not None and c.marked else text)
        n = max(len(d.get(k, {})) for k in (ENTROPY_START, *COLUMNS))
        lines.append(f"| {label} | {n} | " + " | ".join(cells) + " | " + " | ".join(shown) + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.results.entropy_table", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run directories or folders holding them")
    ap.add_argument("--baseline", default="grpo", help="method the paired Δ columns compare with (default grpo)")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(entropy_table(collect(args.runs), args.baseline))
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
