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
import re
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
    several (methods are compared only within one experiment), then the mean start entropy over all runs."""
    runs = col.runs[col.runs["run_dir"].isin(col.completed["run_dir"])].set_index("run_dir")
    per_run = run_summary(col).reindex(runs.index)
    if runs.empty:
        raise ValueError("no completed run; nothing to tabulate")
    blocks = list(runs.groupby(["model", "task", "setting"], dropna=False, sort=True))
    out, starts, comparisons, rendered = [], [], [], []
    for (model, task, setting), grp in blocks:
        head = [f"### {model}, task {task or '?'}" + (f", {setting}" if setting else ""), ""] if len(blocks) > 1 else []
        by = _by_label(grp, per_run)
        starts += [v for d in by.values() for v in d.get(ENTROPY_START, {}).values()]
        rows, comps = _block(by, baseline, len(comparisons))
        comparisons += comps
        rendered.append((head, rows))
    fam = marks.decide(comparisons)  # one family: every Δ of every block
    bold = {c.row for c in fam.comparisons if c.marked}
    for head, rows in rendered:
        out += head + [_PLACE.sub(lambda m: _mark(m, bold), r) for r in rows] + [""]
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


_PLACE = re.compile(r"<(\d+)>(.*?)</>")  # a Δ cell before the table's marks are decided


def _mark(m: re.Match, bold: set) -> str:
    return f"**{m.group(2)}**" if int(m.group(1)) in bold else m.group(2)


def _block(by: dict, baseline: str, first: int = 0) -> tuple[list[str], list[marks.Comparison]]:
    """The block's rows (Δ cells as placeholders filled once the table's family is decided) and its comparisons,
    numbered from ``first``."""
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
    base, comps = by[baseline], []
    for label in sorted(by, key=lambda x: (method_rank(x), x)):
        d = by[label]
        cells = [_fmt(mean_ci(d.get(k, {}).values())) for k in COLUMNS]
        deltas = []
        for k in COLUMNS:
            if label == baseline:
                deltas.append("")
                continue
            i = first + len(comps)
            comps.append(marks.Comparison("delta", i, -1, k, d.get(k, {}), base.get(k, {})))
            text = _fmt(paired_diff(d.get(k, {}), base.get(k, {})), "+")
            deltas.append(f"<{i}>{text}</>")
        n = max(len(d.get(k, {})) for k in (ENTROPY_START, *COLUMNS))
        row = f"| {label} | {n} | " + " | ".join(cells) + " | " + " | ".join(deltas) + " |"
        lines.append(row)
    return lines, comps


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
