"""The cell directory: what the submitter writes before a job starts, and the records it keeps there.

    <runs-dir>/
      sweep.yaml                    the spec as last submitted (written by the submitter only)
      _submitit/<stamp>-g<k>/       submitit's folders: pickles and the job logs (<job>_0_log.{out,err})
      <alias>__<id>/                one cell = one run directory (docs/contracts.md section 2)
        cell.json                   id, alias, sweep, axis values, resources          (written at materialise)
        config.yaml                 the resolved run config; its hash is the id       (written at materialise)
        launch.sh                   the exact command that trains this cell by hand    (written at materialise)
        jobs.jsonl                  one line per submission: job id, executor, submitit folder, time
        submit_error.json           the scheduler refused the job (message), until the next submission
        job_error.json              the job raised (traceback), written by the job itself
        errors/                     the error files of earlier attempts, moved aside at resubmission
        metrics.jsonl, checkpoints/, eval/, result.json      written by the run

Each job writes only inside its own cell directory, and the submitter only writes there while no job of
that cell is active, so many array tasks finishing together cannot corrupt anything. Sweep state is always
rebuilt from these files (``harness.sweeps.status``).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import yaml

from harness.io import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl, read_text
from harness.sweeps.expand import Cell

CELL_FILE = "cell.json"
CONFIG_FILE = "config.yaml"
LAUNCH_FILE = "launch.sh"
JOBS_FILE = "jobs.jsonl"
SUBMIT_ERROR_FILE = "submit_error.json"
JOB_ERROR_FILE = "job_error.json"
RESULT_FILE = "result.json"
SUBMITIT_DIR = "_submitit"


def cell_dir(runs_dir: Path, cell: Cell) -> Path:
    """``<runs-dir>/<alias>__<id>``; an existing directory with the same id is reused even if the alias changed
    (an edited spec that names a cell differently still finds its finished run)."""
    path = Path(runs_dir) / cell.dirname
    if path.exists() or not Path(runs_dir).is_dir():
        return path
    same_id = sorted(p for p in Path(runs_dir).glob(f"*__{cell.id}") if (p / CELL_FILE).exists())
    return same_id[0] if same_id else path


def launch_command(config: dict, run_dir: Path) -> str:
    """The command that trains this cell: its backend's ``launch_command`` (``harness train`` by default)."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    return get_backend(config["backend"]).launch_command(load_config(config), Path(run_dir))


def materialise(
    cell: Cell, runs_dir: Path, sweep: str, spec_path: str | None = None, command: str | None = None
) -> Path:
    """Write cell.json, config.yaml and launch.sh (idempotent; never touches the run's own files)."""
    d = cell_dir(runs_dir, cell)
    d.mkdir(parents=True, exist_ok=True)
    config = with_sweep_group(cell.config, sweep)
    config_text = yaml.safe_dump(config, sort_keys=False)
    cfg_path = d / CONFIG_FILE
    if not cfg_path.is_file() or cfg_path.read_bytes() != config_text.encode():
        atomic_write_text(cfg_path, config_text)
    atomic_write_json(
        d / CELL_FILE,
        {
            "id": cell.id,
            "alias": cell.alias,
            "sweep": sweep,
            "spec": spec_path,
            "axes": cell.axes,
            "resources": cell.resources,
            "index": cell.index,
        },
    )
    if command is None or (config is not cell.config and config["logging"].get("wandb")):  # the group is a flag
        command = launch_command(config, d)
    cmd = command
    alias = " ".join(cell.alias.split())  # a comment line stays one line
    atomic_write_text(d / LAUNCH_FILE, f"#!/usr/bin/env bash\n# cell {alias} ({cell.id})\n{cmd}\n", executable=True)
    return d


def with_sweep_group(config: dict, sweep: str) -> dict:
    """The cell's config with ``logging.wandb_group`` = the sweep's name when the spec left it unset (the trackers'
    group: harness/run/tracking.py). Logging measures nothing, so the run id stays the cell's."""
    logging = config.get("logging")
    if not sweep or not isinstance(logging, dict) or logging.get("wandb_group"):
        return config
    return {**config, "logging": {**logging, "wandb_group": sweep}}


def read_cell(d: Path) -> dict:
    """cell.json, or {} when it is absent or unreadable (the directory name still gives the id)."""
    return read_json(Path(d) / CELL_FILE) or {}


def list_cell_dirs(runs_dir: Path) -> list[Path]:
    """Every cell directory under ``runs_dir`` (those holding cell.json), in expansion order."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"runs directory not found: {runs_dir}")
    dirs = [p.parent for p in runs_dir.glob(f"*/{CELL_FILE}")]
    return sorted(dirs, key=lambda d: (read_cell(d).get("index", 1 << 30), d.name))


def record_job(d: Path, job_id: str, executor: str, folder: Path, group: str) -> None:
    append_jsonl(
        Path(d) / JOBS_FILE,
        {
            "job_id": str(job_id),
            "executor": executor,
            "folder": str(folder),
            "group": group,
            "submitted_at": time.time(),
            "host": socket.gethostname(),
        },
    )


def last_job(d: Path) -> dict | None:
    """The latest submission of the cell (``ValueError`` naming jobs.jsonl when it cannot be read)."""
    jobs = read_jsonl(Path(d) / JOBS_FILE)
    job = jobs[-1] if jobs else None
    if job is not None and not (isinstance(job, dict) and job.get("job_id")):
        raise ValueError(f"{Path(d) / JOBS_FILE}: its last line is not a job record")
    return job


def clear_errors(d: Path) -> None:
    """Before a new submission: errors of earlier attempts no longer describe the cell; they move to
    ``errors/<time>-<name>`` (kept, never deleted)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (SUBMIT_ERROR_FILE, JOB_ERROR_FILE):
        src = Path(d) / name
        if src.exists():
            (Path(d) / "errors").mkdir(exist_ok=True)
            os.replace(src, Path(d) / "errors" / f"{stamp}-{name}")


def record_submit_error(d: Path, message: str, executor: str) -> None:
    atomic_write_json(Path(d) / SUBMIT_ERROR_FILE, {"executor": executor, "message": message, "time": time.time()})


def read_json(path: Path) -> dict | None:
    """A JSON object file, or None when it is absent or unreadable (``json_state`` says why)."""
    return json_state(path)[0]


def json_state(path: Path) -> tuple[dict | None, str | None]:
    """``(object, problem)``: the parsed JSON object (None when absent or unreadable) and why it could not be
    read (None when absent or fine): torn, not UTF-8, not a file, not an object."""
    path = Path(path)
    if not path.exists():
        return None, None
    try:
        data = json.loads(read_text(path))
    except (ValueError, OSError) as e:
        return None, str(e).removeprefix(f"{path}: ").splitlines()[0] or type(e).__name__
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def record_problems(d: Path) -> list[tuple[str, str]]:
    """``[(file name, why)]`` for the cell's own records that cannot be read: cell.json, jobs.jsonl (a torn last
    line included: a submitter killed mid-append)."""
    d, out = Path(d), []
    problem = json_state(d / CELL_FILE)[1]
    if problem:
        out.append((CELL_FILE, problem))
    jobs = d / JOBS_FILE
    if jobs.exists():
        try:
            text = read_text(jobs)
            read_jsonl(jobs)
        except ValueError as e:
            out.append((JOBS_FILE, str(e).removeprefix(f"{jobs}: ")))
        else:
            if text and not text.endswith("\n"):
                out.append((JOBS_FILE, "torn last line ignored"))
    return out


def check_cell_dir(cell: Cell, runs_dir: Path) -> None:
    """Refuse (``ValueError``), before anything is written, a cell directory whose config.yaml cannot be read or
    is another run's (materialise would otherwise overwrite what the run directory's identity rests on)."""
    from harness.io import load_yaml, yaml_problem
    from harness.run.config import run_id_of

    path = cell_dir(runs_dir, cell) / CONFIG_FILE
    if not path.exists():
        return
    try:
        old = load_yaml(read_text(path))
    except ValueError as e:
        problem = str(e).removeprefix(f"{path}: ")
    except yaml.YAMLError as e:
        problem = yaml_problem(e)
    else:
        if isinstance(old, dict) and run_id_of(old) == cell.id:
            return
        problem = "not a run config" if not isinstance(old, dict) else f"the config of run {run_id_of(old)}"
    raise ValueError(
        f"{path}: {problem}; cell {cell.alias} ({cell.id}) cannot be checked against it. Move that cell "
        f"directory aside (or delete the file) and submit again"
    )
