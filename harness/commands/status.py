"""``harness status SWEEP_OR_RUNS_DIR [--runs-dir DIR]``: one row per sweep cell, rebuilt from its directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands._common import print_resubmit_hint
from harness.run.metrics import COMPLETED, FINISHED
from harness.run.rundir import describe, is_locked, kind_of, read_holder
from harness.sweeps import cells as C
from harness.sweeps import index
from harness.sweeps.expand import expand
from harness.sweeps.spec import load_spec
from harness.sweeps.status import (
    CellStatus,
    cell_status,
    cell_statuses,
    format_table,
    not_submitted,
    summary_line,
    sweep_status,
)

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


def spec_runs_dir(spec_path: Path, name: str) -> Path:
    """Where ``spec_path`` was last submitted from here (harness.sweeps.index), else ``runs/<name>`` (said when
    that does not exist: a sweep started elsewhere, or with --runs-dir, needs --runs-dir)."""
    recorded = [d for d in index.runs_dirs(spec_path) if d.is_dir()]
    if recorded:
        if len(recorded) > 1:
            others = ", ".join(str(d) for d in recorded[:-1])
            print(f"note: {spec_path} was also submitted into {others}; showing the latest", file=sys.stderr)
        return recorded[-1]
    default = Path("runs") / name
    if not default.is_dir():
        print(
            f"note: {default} does not exist and no submission of {spec_path} is recorded here (.harness/"
            "sweeps.json); if it was submitted from another directory or with --runs-dir, pass --runs-dir",
            file=sys.stderr,
        )
    return default


def print_run(run_dir: Path, no_tails: bool) -> int:
    """``harness status RUN``: the state of one run directory (a cell's as its sweep shows it)."""
    row = cell_status(run_dir) if (run_dir / C.CELL_FILE).is_file() else run_status(run_dir)
    print(f"{run_dir}: a run directory, {row.state}")
    print(format_table([row], tails=not no_tails))
    return 0


def run_status(d: Path) -> CellStatus:
    """The state of a run directory of ``harness train``: its result.json, else whether a trainer holds it."""
    import yaml

    from harness.io import load_yaml, read_text
    from harness.provenance import read_stamp
    from harness.run.config import run_id_of

    result, problem = C.json_state(d / C.RESULT_FILE)
    rid = (result or {}).get("run_id") or (read_stamp(d) or {}).get("run_id")
    if rid is None:
        try:
            rid = run_id_of(load_yaml(read_text(d / "config.yaml")))
        except (ValueError, OSError, AttributeError, TypeError, yaml.YAMLError):  # an id only shown: "?"
            rid = "?"
    st = CellStatus(dir=d, id=str(rid), alias=d.name, state="pending")
    if problem is not None:
        st.state, st.detail = "failed", f"result.json unreadable ({problem})"
    elif result is not None and result.get("status", COMPLETED) in FINISHED:
        st.state, st.detail = "done", "" if result.get("status", COMPLETED) == COMPLETED else result["status"]
    elif result is not None:
        st.state, st.detail = "failed", f"result.json status {result.get('status')!r} {result.get('error', '')}".strip()
    elif is_locked(d):
        st.state, st.detail = "running", describe(read_holder(d) or {})
    else:
        started = (d / "metrics.jsonl").is_file() or any((d / "checkpoints").glob("*"))
        st.detail = (
            "stopped before it finished (no trainer holds it); rerun its harness train command to resume"
            if started
            else "not started"
        )
    return st


def run(args: argparse.Namespace) -> int:
    target = Path(args.target)
    spec_path: str | Path
    if target.is_file():
        spec = load_spec(target)
        runs_dir = args.runs_dir or spec_runs_dir(target, spec.name)
        rows = cell_statuses(expand(spec), runs_dir)
        spec_path = target
    else:
        if not target.is_dir():
            raise FileNotFoundError(f"no such sweep spec or runs directory: {target}")
        if kind_of(target) == "run":  # one run directory (harness train, or one cell): its own row
            return print_run(target, args.no_tails)
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
