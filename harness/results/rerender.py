"""A committed leaderboard's records (``leaderboard.csv``, ``leaderboard.md``'s notes) read back, and its markdown
re-rendered from them: ``python -m harness.results.rerender RESULTS_DIR``.

The runs behind a committed results folder are often not committed, so ``harness report`` cannot remake it. Its
table can still be re-rendered from the csv, and its marks decided, where no mark needs a test: when every
comparison has fewer than ``marks.MIN_SEEDS`` seeds per arm, nothing is marked (harness/results/marks.py), and
that needs no per-seed values. A folder with enough seeds for a test is refused (its marks need the runs), and so is
a csv that marks a cell of a runs row. The per-run standard errors (``<col>_se``) and the check that each run was
scored at its last step need the runs too: the re-rendered notes say so. The csv is left as it is.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pandas as pd

from . import marks
from . import table as tbl

RERENDERED = (
    "RE-RENDERED from leaderboard.csv (the runs are not committed): the table and its marks under "
    "harness/results/marks.py; the runs' own standard errors (<col>_se) and the per-run step check (STEP) need "
    "the runs and are not in it"
)


def read_records(csv_text: str) -> pd.DataFrame:
    """The csv records as a DataFrame; empty text fields stay empty strings, numbers stay numbers."""
    df = pd.read_csv(io.StringIO(csv_text), keep_default_na=True)
    for c in ("source", "model", "task", "setting", "method", "flag", "seeds", "best"):
        if c in df:
            df[c] = df[c].astype(object).where(df[c].notna(), "").astype(str)
    return df


def leaderboard_columns(table: pd.DataFrame) -> list[str]:
    """Suite columns (in the csv's order), then the two averages: the ``<col>_mean`` columns of the records (the
    entropy columns ``entropy_start/end`` describe a row, they are no score: left out)."""
    cols = [c.removesuffix("_mean") for c in table.columns if c.endswith("_mean")]
    cols = [c for c in cols if c not in tbl.ENTROPY_COLS]
    return [c for c in cols if c not in tbl.AVG_COLS] + [c for c in tbl.AVG_COLS if c in cols]


def parse_leaderboard_md(md: str) -> tuple[str, str | None, list[str]]:
    """(runs folder named in the title, baseline named in the Δ header, the notes: bullets after the table)."""
    title = ""
    m = re.search(r"^# Leaderboard: (.+)$", md, re.M)
    if m:
        title = m.group(1).strip()
    b = re.search(r"Δ avg \(suites\) vs ([^ |]+)", md)
    notes, in_notes = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            in_notes = True
            continue
        if line.startswith("## "):
            if in_notes:
                break
            continue
        if in_notes and line.startswith("- "):
            notes.append(line[2:].strip())
    return title, (b.group(1) if b else None), notes


def _new_notes(old: list[str], family: marks.Family, metric: str) -> list[str]:
    """The old notes with the cell/Δ/bold note replaced by today's (metric, MARKS) and the STEP rule added."""
    keep = [n for n in old if not n.startswith(("Scores in percent", "Metric:", "MARKS:", "STEP:", "RE-RENDERED"))]
    at = next((i for i, n in enumerate(keep) if n.startswith("protocol ")), len(keep))
    return [tbl.scores_note(metric), marks.note(family)] + keep[:at] + [tbl.STEP_NOTE] + keep[at:] + [RERENDERED]


def from_records(records: pd.DataFrame, baseline: str | None, notes: list[str]) -> tbl.Leaderboard:
    """A :class:`~harness.results.table.Leaderboard` of csv records whose rows are all below ``MIN_SEEDS`` seeds
    (nothing marked on runs rows; the paper's rows keep their bolding)."""
    t = records.copy()
    runs = t["source"] == "runs"
    n_cols = [c for c in t.columns if c.endswith("_n") and not c.startswith(tuple(tbl.ENTROPY_COLS))]
    seeds = int(pd.to_numeric(t.loc[runs, n_cols].stack(), errors="coerce").max()) if runs.any() else 0
    if seeds >= marks.MIN_SEEDS:
        raise ValueError(
            f"a row has {seeds} seeds (>= {marks.MIN_SEEDS}): its marks need a test on the runs' per-seed values, "
            "which the csv does not hold; regenerate with harness report RUNS_DIR"
        )
    if (t.loc[runs, "best"] != "").any():
        raise ValueError("the csv marks a runs row's cell (best); regenerate with harness report RUNS_DIR")
    for a in tbl.AVG_COLS:
        t[f"delta_{a}_marked"] = False
        t[f"delta_{a}_paired"] = t[f"delta_{a}_paired"].astype(str).str.lower().eq("true")
    metric = str(t["metric"].iloc[0]) if "metric" in t and len(t) else "avg"
    family = marks.Family(max_seeds=seeds)
    return tbl.Leaderboard(
        rows=t,
        columns=leaderboard_columns(t),
        notes=_new_notes(notes, family, metric),
        show_task=bool(runs.any()) and t.loc[runs, "task"].nunique() > 1,
        baseline=baseline,
        show_setting=bool((t.loc[runs, "setting"] != "").any()),
        show_provenance="provenance" in t,
        show_entropy=all(f"{c}_mean" in t for c in tbl.ENTROPY_COLS),
        metric=metric,
        marks=family,
    )


def rerender(folder) -> Path:
    """Rewrite ``folder/leaderboard.md``'s table and notes from ``folder/leaderboard.csv`` (see the module)."""
    folder = Path(folder)
    md_path = folder / "leaderboard.md"
    md = md_path.read_text(encoding="utf-8")
    _, baseline, notes = parse_leaderboard_md(md)
    lb = from_records(read_records((folder / "leaderboard.csv").read_text(encoding="utf-8")), baseline, notes)
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    body = tbl.to_markdown(lb).rstrip("\n").splitlines()
    out = lines[:start] + body + ([""] + lines[end:] if end < len(lines) else [])
    from harness.io import atomic_write_text

    return atomic_write_text(md_path, "\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.results.rerender RESULTS_DIR (with leaderboard.md, .csv)", file=sys.stderr)
        return 2
    try:
        print(f"wrote {rerender(args[0])}")
    except (ValueError, OSError, StopIteration) as e:
        print(f"error: {args[0]}: {e or 'leaderboard.md holds no table'}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
