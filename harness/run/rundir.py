"""Run-directory rules (docs/contracts.md §2): one trainer per run directory, and runs, sweep runs directories
and report directories never nested in each other.

The lock is an ``flock`` on ``RUN_DIR/.run.lock`` held for the trainer's life: the kernel releases it on any exit,
SIGKILL included, so a stale file never blocks a rerun. The file names the holder (host, pid, process start time)
so a refused second trainer, and ``harness status``, can say who holds it. A process counts as alive only when the
host matches and the pid's start time matches the recorded one (a reused pid is not the trainer).
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import socket
import time
from pathlib import Path

from harness.provenance import STAMP_FILE

LOCK_FILE = ".run.lock"
# Placement looks for files the harness itself made, never for one file name a user may also use (a spec called
# sweep.yaml or a result.json in the repository root must not make it a sweep or a run):
SWEEP_MARKERS = (".submit.lock",)  # a sweep's runs directory: made by its first submission
RUN_MARKERS = ("result.json", "metrics.jsonl", "train.log", LOCK_FILE)  # with config.yaml: a run directory
CELL_FILE = "cell.json"  # a sweep's cell (harness.sweeps.cells)
REPORT_MARKERS = ("leaderboard.md",)
RUN_FILES = (
    "config.yaml",
    STAMP_FILE,
    "metrics.jsonl",
    "eval",
    "checkpoints",
    "result.json",
    "train.log",
    "tensorboard",
    "wandb",
)  # and the files each backend declares (``Backend.run_files``: its own logs)
# what else a run directory may hold: its lock and cell file, result.json files kept aside, replaced runs, the
# after-training stage's export and the trackers' record (harness.run.tracking)
RUN_LEFTOVERS = (LOCK_FILE, CELL_FILE, "result.*.json", "replaced", "export", "trackers.jsonl")


class RunDirBusy(ValueError):
    """Another live trainer holds the run directory."""


class NestingError(ValueError):
    """A run, sweep or report directory placed inside (or around) another."""


# ------------------------------------------------------------------------------------------------ processes
def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if fields[0] == "Z":  # a zombie has exited
        return None
    return int(fields[19])


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def holder_info() -> dict:
    """Who this process is: host, pid, boot id, process start (ticks) and wall-clock start time."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "boot_id": _boot_id(),
        "start_ticks": process_start(pid),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def same_process_alive(info: dict) -> bool | None:
    """True/False when ``info`` names a process on this host (pid alive with the same start time); None when it
    was recorded on another host (this machine cannot tell)."""
    if not info or info.get("host") != socket.gethostname():
        return None
    if info.get("boot_id") and info["boot_id"] != _boot_id():
        return False
    start = process_start(info.get("pid", -1))
    return start is not None and (info.get("start_ticks") is None or start == info["start_ticks"])


def describe(info: dict) -> str:
    return f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, started {info.get('started', '?')}"


# ------------------------------------------------------------------------------------------------ the lock
def read_holder(run_dir: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(run_dir) / LOCK_FILE).read_text() or "null")
    except (OSError, json.JSONDecodeError):
        return None


def is_locked(run_dir: str | os.PathLike) -> bool:
    """Whether a live trainer holds the run directory's lock (tries the lock; works across hosts where the file
    system passes flock on, e.g. NFSv4)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


class RunDirLock:
    """``with RunDirLock(run_dir):`` holds the run directory for this process or raises ``RunDirBusy``."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir, self.fd = Path(run_dir), None

    def acquire(self) -> RunDirLock:
        from harness.io import file_mode

        path = self.run_dir / LOCK_FILE
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode())
        except OSError as e:  # a read-only or foreign directory: one line naming it
            raise ValueError(
                f"run directory {self.run_dir}: cannot write there ({e.strerror or e}); a trainer writes its run "
                f"directory, use one you can write to"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            held = read_holder(self.run_dir) or {}
            raise RunDirBusy(
                f"run directory {self.run_dir} is in use by another trainer ({describe(held)}); "
                f"wait for it to finish or stop it (kill {held.get('pid', 'PID')} on "
                f"{held.get('host', 'its host')})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder_info()) + "\n").encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # no holder named once released
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ------------------------------------------------------------------------------------------------ nesting
def kind_of(d: Path) -> str | None:
    """'sweep' (a sweep's runs directory), 'run', 'report' or None."""
    if any((d / m).exists() for m in SWEEP_MARKERS):
        return "sweep"
    if (d / "config.yaml").is_file() and any((d / m).exists() for m in RUN_MARKERS):
        return "run"
    if (d / LOCK_FILE).exists() or (d / CELL_FILE).is_file():
        return "run"
    if any((d / m).is_file() for m in REPORT_MARKERS):
        return "report"
    return None


def _children_runs(d: Path, depth: int = 2) -> list[Path]:
    out: list[Path] = []
    if depth == 0 or not d.is_dir():
        return out
    try:
        children = sorted(c for c in d.iterdir() if c.is_dir() and not c.name.startswith((".", "_")))
    except OSError:
        return out
    for c in children:
        if c.name == "replaced":  # the runner's own archive of replaced runs
            continue
        if kind_of(c) in ("run", "sweep"):
            out.append(c)
        else:
            out.extend(_children_runs(c, depth - 1))
    return out


def foreign_entries(d: Path) -> list[str]:
    """Names in ``d`` that no run writes (``RUN_FILES``, the backends' files, ``RUN_LEFTOVERS``): a folder holding
    any is not a run directory (the project root, a home or source folder)."""
    from harness.backends import run_file_patterns

    patterns = (*RUN_FILES, *RUN_LEFTOVERS, *run_file_patterns())
    try:
        names = sorted(e.name for e in d.iterdir())
    except OSError:
        return []
    return [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def check_placement(path: str | os.PathLike, kind: str) -> None:
    """Refuse ``path`` as a ``kind`` ('run', 'cell', 'sweep' or 'report') directory when it is inside a run or
    a sweep's runs directory (a cell may sit in its sweep's), or holds runs itself, or (a run) holds files no run
    writes; a report directory may be neither a run nor a sweep's runs directory. Raise NestingError."""
    path = Path(path).absolute()
    names = {
        "run": "run directory",
        "cell": "run directory",
        "sweep": "sweep runs directory",
        "report": "report directory",
    }
    what = names[kind]
    if kind == "report":
        return _check_report_place(path, str(path))
    here = kind_of(path) if path.is_dir() else None
    if kind in ("run", "cell") and here == "sweep":
        raise NestingError(
            f"{path} is a sweep's runs directory; a {what} inside it would hide the sweep's cells "
            f"(use a directory outside it)"
        )
    if kind == "sweep" and here == "run":
        raise NestingError(f"{path} is a run directory; use a {what} outside it")
    for i, parent in enumerate(path.parents):
        pk = kind_of(parent)
        if pk == "run":
            raise NestingError(
                f"{path}: this {what} would be inside the run directory {parent}; use a directory outside it"
            )
        if pk == "sweep" and not (kind == "cell" and i == 0):
            raise NestingError(
                f"{path}: this {what} would be inside the sweep runs directory {parent}; use a directory outside it"
            )
    if kind in ("run", "cell") and here != "run":
        inner = _children_runs(path)
        if inner:
            raise NestingError(
                f"{path} holds other runs ({inner[0]}{' ...' if len(inner) > 1 else ''}); a run "
                f"directory must not contain runs"
            )
        foreign = foreign_entries(path) if path.is_dir() else []
        if foreign:
            shown = ", ".join(foreign[:5]) + (f", ... ({len(foreign)} entries)" if len(foreign) > 5 else "")
            raise NestingError(
                f"{path} holds files that are not a run's ({shown}); a run directory is written by the trainer: "
                f"give a new or empty folder"
            )
    if kind == "sweep":
        strays = [c for c in _children_runs(path, 1) if kind_of(c) == "run" and not (c / "cell.json").is_file()]
        if strays:
            raise NestingError(
                f"{path} holds a run that is not one of its cells ({strays[0]}: run files, no {CELL_FILE} file); "
                f"move it out first"
            )


def check_output_place(path: str | os.PathLike, flag: str, what: str = "folder") -> Path:
    """The one rule for every command's output (report, table, plot, mechanism, eval, site, export and sweep
    --results-dir): ``path`` (a ``what`` = 'folder' or 'file') must be writable (harness.io) and neither be nor lie
    inside a run directory or a sweep's runs directory, whose readers would take it for run files."""
    from harness.io import check_output_dir, check_output_file

    path = Path(path)
    (check_output_file if what == "file" else check_output_dir)(path, flag)
    folder = path.parent if what == "file" else path
    _check_report_place(folder.absolute(), f"{flag} {path}" if flag else str(path), what)
    return path


def _check_report_place(folder: Path, label: str, what: str = "folder") -> None:
    for d in (folder, *folder.parents):
        k = kind_of(d) if d.is_dir() else None
        if k not in ("run", "sweep"):
            continue
        name = "run directory" if k == "run" else "sweep runs directory"
        where = f"{d} is a {name}" if d == folder and what == "folder" else f"it would be inside the {name} {d}"
        raise NestingError(
            f"{label}: {where}; its readers would take the output for run files: write it outside run and sweep "
            f"directories"
        )
