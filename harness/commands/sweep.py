"""``harness sweep SPEC [--executor local|slurm|debug] [--runs-dir DIR] [--dry-run] [--wait]
[--only failed|pending|unknown|ALIAS|ID ...] [--results-dir DIR] [--online]``: expand a sweep spec and submit its
cells (a spec with ``stage_dir`` only once its inputs are staged: harness stage)."""

from __future__ import annotations

import argparse
import fcntl
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import yaml

from harness.commands._common import print_resubmit_hint
from harness.io import atomic_write_text
from harness.sweeps import cells as C
from harness.sweeps import index
from harness.sweeps.expand import Cell, expand
from harness.sweeps.resources import (
    EXECUTORS,
    check_executor,
    check_fits_executor,
    executor_parameters,
    group_by_resources,
)
from harness.sweeps.spec import SweepSpec, load_spec
from harness.sweeps.status import CellStatus, cell_statuses, format_table, is_active, summary_line

ORDER = 50
ONLY_STATES = ("failed", "pending", "unknown")


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="expand a sweep spec and submit its cells (local, slurm or debug executor)",
        description="Expand SPEC into cells, write each cell's directory, skip finished cells and "
        "submit the rest through submitit (one job array per resource group).",
    )
    p.add_argument("spec", help="sweep spec YAML (see sweeps/*.yaml)")
    p.add_argument(
        "--executor",
        default="local",
        choices=EXECUTORS,
        help="local: subprocesses here, waits (default); slurm: sbatch job arrays; debug: in-process",
    )
    p.add_argument("--runs-dir", type=Path, help="where cell directories go (default runs/<spec name>)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, print the cells, resources and launch commands; write and submit nothing",
    )
    p.add_argument("--wait", action="store_true", help="slurm: follow the jobs with a progress bar until all finish")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="STATE|CELL",
        help=f"submit only cells in these states ({', '.join(ONLY_STATES)}) or with these aliases/ids",
    )
    p.add_argument(
        "--results-dir", type=Path, help="after the sweep finishes, write its report here (harness.results.report)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--online",
        action="store_true",
        help="slurm: the compute nodes reach the Hugging Face hub (else a sweep that reads the hub must be staged "
        "first: harness stage)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_executor(args.executor)
    spec = load_spec(args.spec)
    cells = expand(spec)  # every cell validated before anything is written or submitted
    runs_dir = args.runs_dir or Path("runs") / spec.name
    from harness.run.rundir import check_placement

    check_placement(runs_dir, "sweep")  # never inside a run or another sweep, never around stray runs
    check_owner(runs_dir, spec.name)  # never into another sweep's runs directory
    if args.results_dir:  # refused now, not after the sweep ran
        from harness.run.rundir import check_output_place

        check_output_place(args.results_dir, "--results-dir")
        res, own = Path(args.results_dir).absolute(), Path(runs_dir).absolute()
        if res == own or own in res.parents:  # this sweep's runs directory, not made yet
            raise ValueError(
                f"--results-dir {args.results_dir}: it would be inside this sweep's runs directory {runs_dir}; "
                "write it outside run and sweep directories"
            )
    cells = staged(spec, cells, args.executor, args.online, args.dry_run)
    from harness.sweeps import disk

    plans = disk.cell_plans(cells)
    disk.check_budgets(cells, plans)  # every cell's disk plan within its resources.disk_gb, in a dry run too
    if args.dry_run:
        print_plan(spec, cells, runs_dir, args.executor)
        print(f"\n{disk.summary(cells, plans, runs_dir)}")
        return 0
    check_only(cells, args.only)
    if args.executor == "slurm" and shutil.which("sbatch") is None:
        raise ValueError(
            "--executor slurm: sbatch is not on PATH (no SLURM client here); run on a login node, use "
            "--executor local, or --dry-run to see the plan"
        )
    for c in cells:
        check_fits_executor(c.resources, args.executor, f"cell {c.alias}")
    commands = launch_commands(cells, runs_dir)  # backend errors surface before anything is written
    with submission_lock(runs_dir):
        return _submit(args, spec, cells, runs_dir, commands, plans)


def staged(spec: SweepSpec, cells: list[Cell], executor: str, online: bool, dry_run: bool) -> list[Cell]:
    """The cells pointed at the spec's stage (``stage_dir``: offline jobs, harness/sweeps/staging.py). A sweep whose
    inputs are not staged, or a SLURM sweep that would read the hub from compute nodes, is refused here, before
    anything is written or queued; a dry run says so and shows the cells as they are."""
    from harness.sweeps.staging import apply_stage, stage_dir_of, submission_problem

    problem = submission_problem(spec, cells, executor, online)
    if problem and not dry_run:
        raise ValueError(problem)
    if problem:
        print(f"note: {problem}")
    stage = stage_dir_of(spec)
    return cells if stage is None or problem else apply_stage(cells, stage)


@contextmanager
def submission_lock(runs_dir: Path):
    """One `harness sweep` at a time per runs directory (two would submit the same cells twice)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / ".submit.lock"
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{runs_dir}: another `harness sweep` is submitting into this directory ({path} is "
                f"locked); wait for it to finish or use another --runs-dir"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _submit(
    args: argparse.Namespace,
    spec: SweepSpec,
    cells: list[Cell],
    runs_dir: Path,
    commands: dict[str, str],
    plans: dict,
) -> int:
    from harness.sweeps.submit import submit_cells, wait_for  # submitit: only when something is submitted

    existing = {c.id: st for c, st in zip(cells, cell_statuses(cells, runs_dir))}
    todo, skipped = select(cells, existing, args.only)
    for c in todo:  # every cell directory checked before any is written
        C.check_cell_dir(c, runs_dir)
    for c in cells:
        if c not in todo:  # not submitted now: a damaged config.yaml is named, not refused
            try:
                C.check_cell_dir(c, runs_dir)
            except ValueError as e:
                print(f"warning: {e}", file=sys.stderr)
    from harness.sweeps.disk import check_free

    check_free(todo, plans, runs_dir)  # before anything is written or queued
    problem = index.record(args.spec, runs_dir)  # `harness status SPEC` finds this runs directory
    if problem:
        print(f"warning: not recorded where {args.spec} was submitted ({problem})", file=sys.stderr)
    for reason, names in skipped.items():
        if names:
            print(f"skip {len(names)} {reason}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    if todo:
        atomic_write_text(runs_dir / "sweep.yaml", spec_copy(spec, args.spec))
        resumed = 0
        for c in todo:
            d = C.materialise(c, runs_dir, spec.name, spec_path=str(args.spec), command=commands[c.id])
            resumed += any((d / "checkpoints").glob("*"))
        print(
            f"{spec.name}: submitting {len(todo)} of {len(cells)} cells ({resumed} resume from a checkpoint) "
            f"with the {args.executor} executor into {runs_dir}"
        )
        report = submit_cells(
            todo, runs_dir, args.executor, sweep=spec.name, progress=not args.no_progress, population=spec.population
        )
        if report.refused:
            print(
                f"{len(report.refused)} cells refused by the scheduler (marked failed); the rest were submitted",
                file=sys.stderr,
            )
    else:
        print(f"{spec.name}: nothing to submit ({len(cells)} cells)")

    dirs = [C.cell_dir(runs_dir, c) for c in cells if C.cell_dir(runs_dir, c).is_dir()]
    finished = args.executor != "slurm" or args.wait
    if args.executor == "slurm" and args.wait:  # also follows jobs an earlier submission left running
        wait_for(dirs, progress=not args.no_progress, desc=f"{spec.name} [slurm]")
    rows = cell_statuses(cells, runs_dir)
    print(summary_line(rows))
    if finished:
        print(format_table(rows))
        _report(runs_dir, args.results_dir)
    else:
        print(f"follow with: harness status {runs_dir}")
    print_resubmit_hint(rows, args.spec, runs_dir)
    return 1 if any(r.state == "failed" for r in rows) else 0


def check_owner(runs_dir: Path, name: str) -> None:
    """Refuse a runs directory that holds another sweep (by the name in its sweep.yaml copy and its cells'
    cell.json): a second spec would mix its cells in and take over sweep.yaml. An edited spec of the same name is
    that sweep, resubmitted."""
    if not runs_dir.is_dir():
        return
    owners: dict[str, Path] = {}
    copy = runs_dir / "sweep.yaml"
    if copy.exists():
        try:
            other = load_spec_name(copy)
        except ValueError as e:
            print(f"warning: {e}; the cells' cell.json tell which sweep this is", file=sys.stderr)
        else:
            if other:
                owners.setdefault(other, copy)
            try:
                load_spec(copy)
            except (ValueError, FileNotFoundError) as e:  # damaged or from an older schema: say so, never trust it
                print(f"warning: {str(e).splitlines()[0]} (the copy of the last submission)", file=sys.stderr)
    for d in C.list_cell_dirs(runs_dir):
        sweep = C.read_cell(d).get("sweep")
        if isinstance(sweep, str) and sweep:
            owners.setdefault(sweep, d / C.CELL_FILE)
    others = {k: v for k, v in owners.items() if k != name}
    if others:
        other, where = next(iter(others.items()))
        raise ValueError(
            f"{runs_dir} holds sweep '{other}' ({where}), not '{name}'; give this sweep its own --runs-dir "
            f"(default runs/{name})"
        )


def load_spec_name(path: Path) -> str | None:
    """The ``name`` of a spec copy (sweep.yaml) without validating the rest (it may predate today's schema)."""
    from harness.io import read_yaml_mapping
    from harness.sweeps.spec import SpecError

    name = read_yaml_mapping(path, SpecError, "a sweep spec", "a name").get("name")
    return name if isinstance(name, str) else None


def check_only(cells: list[Cell], only: list[str] | None) -> None:
    known = {c.alias for c in cells} | {c.id for c in cells}
    unknown = sorted({o for o in only or [] if o not in ONLY_STATES} - known)
    if unknown:
        from harness.registry import did_you_mean

        raise ValueError("--only: " + did_you_mean(unknown[0], sorted(known) + list(ONLY_STATES), "cell or state"))


def select(cells: list[Cell], existing: dict[str, CellStatus], only: list[str] | None):
    """Cells to submit: not done, no job still out, and (with --only) in the given states or named."""
    check_only(cells, only)
    wanted_states = {o for o in only or [] if o in ONLY_STATES}
    wanted_names = {o for o in only or [] if o not in ONLY_STATES}
    todo, skipped = (
        [],
        {"done (result.json)": [], "with a job still queued or running": [], "not selected by --only": []},
    )
    for c in cells:
        st = existing[c.id]
        if st.state == "done":
            skipped["done (result.json)"].append(c.alias)
        elif only and not (st.state in wanted_states or c.alias in wanted_names or c.id in wanted_names):
            skipped["not selected by --only"].append(c.alias)
        elif is_active(st) and not (st.state == "unknown" and "unknown" in wanted_states):
            skipped["with a job still queued or running"].append(c.alias)
        else:
            todo.append(c)
    return todo, skipped


def spec_copy(spec: SweepSpec, source: str | Path) -> str:
    """The spec as submitted, self-contained (``base`` inlined), for ``harness status`` and resubmission."""
    text = yaml.safe_dump({**spec.raw, "base": spec.base}, sort_keys=False)
    return f"# {source} as last submitted (base inlined)\n{text}"


def launch_commands(cells: list[Cell], runs_dir: Path) -> dict[str, str]:
    """Each cell's launch command (the OpenRLHF backend validates its own section here), with absolute paths: a
    shell runs it by hand from anywhere (launch.sh)."""
    out = {}
    for c in cells:
        try:
            out[c.id] = C.launch_command(c.config, C.cell_dir(runs_dir, c).absolute())
        except ValueError as e:
            raise ValueError(f"cell {c.alias}: {e}") from None
    return out


def print_plan(spec: SweepSpec, cells: list[Cell], runs_dir: Path, executor: str) -> None:
    from harness.run.after_training import describe as describe_eval
    from harness.run.config import load_config

    groups = group_by_resources(cells)
    print(
        f"sweep {spec.name}: {len(cells)} cells in {len(groups)} resource group(s); runs dir {runs_dir}; "
        f"executor {executor} (dry run: nothing written or submitted)"
    )
    for k, (res, group) in enumerate(groups):
        params = executor_parameters(res, "slurm", f"{spec.name}-g{k}")
        print(f"\ngroup g{k}: {len(group)} cells, one job array; submitit parameters (slurm executor):")
        if spec.population == "auto":
            print_populations(group, executor, res)
        for key, value in params.items():
            print(f"    {key}: {value}")
        if res.get("disk_gb") is not None:
            print(f"    disk_gb: {res['disk_gb']:g} (each cell's disk plan must fit it; not an sbatch option)")
        commands = launch_commands(group, runs_dir)
        for c in group:
            print(f"  {c.alias}  id={c.id}  dir={C.cell_dir(runs_dir, c)}")
            print(f"    $ {commands[c.id]}")
            print(f"    {describe_eval(load_config(c.config))}")


def print_populations(group: list[Cell], executor: str, resources: dict) -> None:
    """``population: auto``: the population jobs the group's cells would form, and why cells train apart."""
    from harness.sweeps.population import describe, plan_units
    from harness.sweeps.resources import local_parallelism

    parallel = local_parallelism(resources) if executor == "local" else None
    units, notes = plan_units(group, "auto", parallel)
    print(f"  population: auto: {describe(units)}")
    for u in units:
        if u.population:
            print(f"    population of {len(u.cells)}: {', '.join(c.alias for c in u.cells)}")
    for note in notes:
        print(f"    {note}")


def _report(runs_dir: Path, results_dir: Path | None) -> None:
    if results_dir is None:
        return
    try:
        from harness.results.report import write_sweep_report
    except ImportError:
        print("note: no results report (harness.results.report is not available)", file=sys.stderr)
        return
    write_sweep_report(runs_dir, results_dir)
    print(f"report: {results_dir}")
