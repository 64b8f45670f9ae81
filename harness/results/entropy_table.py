"""Entropy and training reward per method, mean ± 95% CI over seeds, and the paired Δ vs a baseline (markdown).

    python -m harness.results.entropy_table RUNS [RUNS ...] [--baseline grpo] > entropy.md

Per finished run, from its metrics.jsonl: the entropy (``entropy``) at its start and end and the training reward
(``reward/mean``) at its end, each the mean over the first / last ``edge_steps(N)`` of its N logged steps
(harness/run/metrics.py: N // 10, at least 1, at most 5; the window of result.json's summary, ``harness table`` and
``harness mechanism``). Rows: methods in ``METHOD_ORDER``; n = runs. Intervals: harness.results.stats (Student t;
Δ paired by seed). A bold Δ: its interval excludes zero. Runs of different models, tasks or settings get one
table each (methods are compared only within one experiment).
"""

from __future__ import annotations

import argparse
import sys

from harness.run.metrics import ENTROPY_END, ENTROPY_START, REWARD_END, method_rank

from .collect import Collection, collect
from .stats import excludes, mean_ci, paired_diff
from .table import run_summary

COLUMNS = {ENTROPY_END: "H end", REWARD_END: "reward end"}


def _fmt(iv, sign: str = "") -> str:
    return f"{iv.mean:{sign}.3f} ± {iv.half:.3f}"


def entropy_table(col: Collection, baseline: str = "grpo") -> str:
    """The markdown table(s): one per (model, task, setting) block, each headed by the block's name when there are
    several (methods are compared only within one experiment), then the mean start entropy over all runs."""
    runs = col.runs[col.runs["run_dir"].isin(col.completed["run_dir"])].set_index("run_dir")
    per_run = run_summary(col).reindex(runs.index)
    if runs.empty:
        raise ValueError("no completed run; nothing to tabulate")
    blocks = list(runs.groupby(["model", "task", "setting"], dropna=False, sort=True))
    out, starts = [], []
    for (model, task, setting), grp in blocks:
        if len(blocks) > 1:
            out += [f"### {model}, task {task or '?'}" + (f", {setting}" if setting else ""), ""]
        by = _by_label(grp, per_run)
        starts += [v for d in by.values() for v in d.get(ENTROPY_START, {}).values()]
        out += _block(by, baseline) + [""]
    h0 = mean_ci(starts)
    out.append(f"Entropy at the start over all runs: {h0.mean:.3f} ± {h0.half:.3f} (n = {h0.n}).")
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


def _block(by: dict, baseline: str) -> list[str]:
    if baseline not in by:
        raise ValueError(f"baseline method {baseline!r} has no completed run; methods present: {', '.join(sorted(by))}")
    titles = list(COLUMNS.values())
    lines = [
        "| method | n | "
        + " | ".join(f"{t} (mean ± 95% CI)" for t in titles)
        + " | "
        + " | ".join(f"Δ {t} vs {baseline} (paired)" for t in titles)
        + " |",
        "|---" * (2 + 2 * len(titles)) + "|",
    ]
    base = by[baseline]
    for label in sorted(by, key=lambda x: (method_rank(x), x)):
        d = by[label]
        cells = [_fmt(mean_ci(d.get(k, {}).values())) for k in COLUMNS]
        deltas = []
        for k in COLUMNS:
            if label == baseline:
                deltas.append("")
                continue
            iv = paired_diff(d.get(k, {}), base.get(k, {}))
            deltas.append(f"**{_fmt(iv, '+')}**" if excludes(iv) else _fmt(iv, "+"))
        n = max(len(d.get(k, {})) for k in (ENTROPY_START, *COLUMNS))
        lines.append(f"| {label} | {n} | " + " | ".join(cells) + " | " + " | ".join(deltas) + " |")
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
