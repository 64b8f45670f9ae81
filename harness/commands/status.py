"""``harness status SWEEP_OR_RUNS_DIR [--runs-dir DIR]``: one row per sweep cell, rebuilt from its directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands._common import print_resubmit_hint
from harness.sweeps import cells as C
from harness.sweeps.expand import expand
from harness.sweeps.spec import load_spec
from harness.sweeps.status import CellStatus, cell_statuses, format_table, not_submitted, summary_line, sweep_status

ORDER = 60


def register(sub) -> None:
    s = sub.add_parser(
        "status",
        help="one row per sweep cell: pending / running / done / failed",
        description="Rebuild the state of every cell from the cell directories (and one sacct call).",
    )
    s.add_argument("target", help="a runs directory, or a sweep spec (cells under --runs-dir or runs/<name>)")
    s.add_argument("--runs-dir", type=Path, help="with a spec: where its cells are (default runs/<spec name>)")
    s.add_argument("--no-tails", action="store_true", help="do not print the stderr tail of failed cells")
    s.set_defaults(func=run)


def with_spec_cells(rows: list[CellStatus], runs_dir: Path) -> list[CellStatus]:
    """Rows in the order of the last submitted spec (sweep.yaml), with its cells not yet written as pending, and
    directories whose id is no longer a cell of it (its config changed since) flagged at the end."""
    if not (runs_dir / "sweep.yaml").exists():
        return rows
    try:
        cells = expand(load_spec(runs_dir / "sweep.yaml"))
    except (ValueError, FileNotFoundError, KeyError, TypeError) as e:  # it no longer validates: the dirs as they are
        print(f"note: {str(e).splitlines()[0]}; showing the cell directories as they are", file=sys.stderr)
        return rows
    by_id = {r.id: r for r in rows}
    current = [by_id.get(c.id) or not_submitted(c, runs_dir) for c in cells]
    ids = {c.id for c in cells}
    stale = [r for r in rows if r.id not in ids]
    for r in stale:
        r.detail = (r.detail + " " if r.detail else "") + "[not a cell of sweep.yaml any more]"
    return current + stale


def run(args: argparse.Namespace) -> int:
    target = Path(args.target)
    spec_path: str | Path
    if target.is_file():
        spec = load_spec(target)
        runs_dir = args.runs_dir or Path("runs") / spec.name
        rows = cell_statuses(expand(spec), runs_dir)
        spec_path = target
    else:
        if not target.is_dir():
            raise FileNotFoundError(f"no such sweep spec or runs directory: {target}")
        runs_dir = target
        rows = sweep_status(runs_dir)
        if not rows:
            raise ValueError(f"{runs_dir}: no cell directories (cell.json) here; is this a sweep's runs directory?")
        first = C.read_cell(rows[0].dir).get("spec")
        spec_path = first if first and Path(first).is_file() else runs_dir / "sweep.yaml"
        rows = with_spec_cells(rows, runs_dir)
    print(f"{runs_dir}: {summary_line(rows)}")
    print(format_table(rows, tails=not args.no_tails))
    print_resubmit_hint(rows, spec_path, runs_dir)
    return 0
