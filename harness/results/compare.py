"""A new leaderboard beside a committed one: per cell the committed mean ± 95% CI, the new mean, and whether the new
mean falls inside the committed interval. ``make quickstart`` prints it at the end.

    python -m harness.results.compare results/quickstart results/quickstart-local

Each folder holds a ``leaderboard.csv`` written by ``harness report`` (``harness sweep --results-dir``). A cell is a
run row (model, task, setting, method) × a score column: every suite and H start / H end (the averages repeat the
suites; the Δ columns derive from them). Values are the csv's: scores in percent, entropies in nats.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

KEY = ("model", "task", "setting", "method")
SKIPPED = ("avg_suites", "avg_samples")  # averages of the suite columns: no new information


def read_cells(folder: str | Path) -> dict[tuple, dict[str, tuple[float, float, int]]]:
    """row key -> column -> (mean, ci half-width or NaN, n), for the run rows of FOLDER/leaderboard.csv."""
    path = Path(folder) / "leaderboard.csv"
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError) as e:
        hint = "write it with `harness report RUNS --out DIR`"
        raise ValueError(f"{path}: cannot read the leaderboard ({e}); {hint}") from None
    if not rows or any(k not in rows[0] for k in (*KEY, "source")):
        raise ValueError(f"{path}: not a leaderboard csv of `harness report` (needs columns {', '.join(KEY)}, source)")
    columns = [c[: -len("_mean")] for c in rows[0] if c.endswith("_mean") and c[: -len("_mean")] not in SKIPPED]
    cells = {}
    for row in rows:
        if row["source"] != "runs":  # the paper's or lm-eval's rows are the same in both folders
            continue
        got = {c: (_num(row[f"{c}_mean"]), _num(row.get(f"{c}_ci")), _count(row.get(f"{c}_n"))) for c in columns}
        cells[tuple(row[k] for k in KEY)] = {c: v for c, v in got.items() if not math.isnan(v[0])}
    return cells


def _num(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _count(text) -> int:
    n = _num(text)
    return 0 if math.isnan(n) else int(n)


def compare(committed: dict, new: dict) -> tuple[list[list[str]], int, int]:
    """Table rows (model, method, column, committed, new, inside?) and the counts (inside, with an interval)."""
    out, inside, judged = [], 0, 0
    for key in _union(committed, new):  # the committed leaderboard's order, then rows only the new one has
        old_cols, new_cols = committed.get(key, {}), new.get(key, {})
        for col in _union(old_cols, new_cols):
            old, now = old_cols.get(col), new_cols.get(col)
            label = [key[0], key[3] + (f" ({key[2]})" if key[2] else ""), col]
            if old is None or now is None:
                out.append(label + [_fmt(old), _fmt(now), "missing in committed" if old is None else "missing in new"])
                continue
            (mean, half, _), (value, _, _) = old, now
            if math.isnan(half):
                verdict = "no interval (n = 1)"
            else:
                judged += 1
                ok = mean - half <= value <= mean + half
                inside += ok
                verdict = "yes" if ok else f"**no** ({value - mean:+.3g})"
            out.append(label + [_fmt(old), _fmt(now), verdict])
    return out, inside, judged


def _union(first: dict, second: dict) -> list:
    return list(first) + [k for k in second if k not in first]


def _fmt(cell) -> str:
    if cell is None:
        return "—"
    mean, half, n = cell
    return f"{mean:.3g} (n={n})" if math.isnan(half) else f"{mean:.3g} ± {half:.3g} (n={n})"


def render(committed_dir, new_dir) -> str:
    rows, inside, judged = compare(read_cells(committed_dir), read_cells(new_dir))
    head = ["model", "method", "column", f"committed ({committed_dir})", f"new ({new_dir})", "new mean inside?"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += [
        "",
        f"{inside} of {judged} new means fall inside the committed 95% interval of the mean. Scores in percent, "
        "H start / H end in nats. Another CPU rounds floats differently and the seeds then diverge, so expect "
        "differences of the size of the seed noise; a cell or two outside says little on its own.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.results.compare", description=__doc__.splitlines()[0])
    ap.add_argument("committed", help="results folder to compare against (e.g. results/quickstart)")
    ap.add_argument("new", help="results folder of the new run (e.g. results/quickstart-local)")
    args = ap.parse_args(argv)
    try:
        sys.stdout.write(render(args.committed, args.new))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
