"""Cell states rebuilt from the cell directories (and, for jobs still out, one scheduler query).

    pending   not submitted yet, or queued (waiting for resources, requeued)
    running   the job is running
    done      result.json says completed (or insufficient_updates: finished, flagged, never retried)
    failed    the run, the job or the submission failed: result.json with another status, job_error.json,
              submit_error.json, or the scheduler ended the job (CANCELLED, TIMEOUT, OUT_OF_MEMORY, ...)
    unknown   a job was submitted but the scheduler cannot be asked (no sacct here)

A cell's identity is its config hash; job ids are only used to ask the scheduler about the latest attempt.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.run import rundir
from harness.run.metrics import COMPLETED, FINISHED
from harness.sweeps import cells as C
from harness.sweeps.expand import Cell

_PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\[\d+:\d+(<[\d:?]+)?,")  # tqdm bar lines are not errors
STATES = ("pending", "running", "done", "failed", "unknown")
_PENDING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESIZING", "SUSPENDED")
_RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")


@dataclass
class CellStatus:
    dir: Path
    id: str
    alias: str
    state: str
    job_id: str | None = None
    detail: str = ""
    tail: list[str] = field(default_factory=list)  # stderr tail / traceback for failures
    interrupted: bool = False  # stopped by Ctrl-C of its local sweep: pending, but no job of it is out


# ---------------------------------------------------------------------------------------------- scheduler
def sacct_states(job_ids: Iterable[str], timeout_s: float = 30) -> dict[str, str] | None:
    """``{job_id: STATE}`` from one sacct call (array tasks still pending expand from ``12_[3-5%2]``).

    None when sacct cannot be run or fails (no accounting): the caller reports ``unknown``.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(ids)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    states: dict[str, str] = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or parts[1] in ("", "State"):
            continue
        jid, state = parts[0], parts[1].split()[0]
        m = re.fullmatch(r"(\d+)_\[(.+)\]", jid)
        if m:  # pending array tasks: 12_[0-5,7%2]
            for lo, hi in re.findall(r"(\d+)(?:-(\d+))?", m.group(2).split("%")[0]):
                for i in range(int(lo), int(hi or lo) + 1):
                    states.setdefault(f"{m.group(1)}_{i}", state)
        else:
            states[jid] = state  # later rows (the newest attempt after a requeue) win
    return states


def _pid_alive(pid: str, submitted_at: float | None = None) -> bool:
    """The local job's process is alive: the pid exists and (when the submission time is known) it started
    within a minute of it, so a reused pid is not taken for the job."""
    from harness.run.rundir import process_start

    try:
        ticks = process_start(int(pid))
    except ValueError:
        return False
    if ticks is None:
        return False
    if submitted_at is None:
        return True
    return abs(_boot_time() + ticks / os.sysconf("SC_CLK_TCK") - float(submitted_at)) < 60


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _job_paths(job: dict):
    from submitit.core.utils import JobPaths

    return JobPaths(job["folder"], job_id=job["job_id"], task_id=0)


def _submitit_error(job: dict) -> str | None:
    """The traceback submitit pickled when the job raised, if any."""
    from submitit.core.utils import pickle_load

    try:
        kind, payload = pickle_load(_job_paths(job).result_pickle)
    except Exception:  # noqa: BLE001 - absent or unreadable means "no verdict from submitit"
        return None
    return str(payload) if kind == "error" else None


def stderr_tail(job: dict | None, n: int = 12) -> list[str]:
    if not job:
        return []
    try:
        lines = _job_paths(job).stderr.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip() and not _PROGRESS.search(line)][-n:]


# ---------------------------------------------------------------------------------------------- one cell
def cell_status(d: Path, slurm: dict[str, str] | None = None) -> CellStatus:
    """The state of one cell directory; ``slurm`` is the sacct answer for every slurm job id (or None). A record
    of the cell that cannot be read (cell.json, jobs.jsonl) is named in its detail."""
    d = Path(d)
    st = _cell_status(d, slurm)
    notes = [f"{name} unreadable ({why})" for name, why in C.record_problems(d) if name not in st.detail]
    if notes:
        st.detail = "; ".join(([st.detail] if st.detail else []) + notes)
    return st


def _cell_status(d: Path, slurm: dict[str, str] | None) -> CellStatus:
    info = C.read_cell(d)
    st = CellStatus(
        dir=d, id=info.get("id", d.name.rsplit("__", 1)[-1]), alias=info.get("alias", d.name), state="pending"
    )
    try:
        job = C.last_job(d)
    except ValueError:  # jobs.jsonl garbled: the job cannot be followed (named by cell_status)
        job, jobs_unreadable = None, True
    else:
        jobs_unreadable = False
    st.job_id = job["job_id"] if job else None

    result, problem = C.json_state(d / C.RESULT_FILE)
    if problem is not None:  # present but unreadable (truncated, not UTF-8): never "no result.json"
        st.state, st.detail = "failed", f"result.json unreadable ({problem}); resubmitting resumes the run"
        st.tail = stderr_tail(job)
        return st
    if result is not None:
        status = result.get("status", COMPLETED)
        if status in FINISHED:  # finished (insufficient_updates is flagged, never retried)
            st.state = "done"
            if status != COMPLETED:
                st.detail = (
                    f"{status} ({(result.get('updates') or {}).get('made')} of "
                    f"{(result.get('updates') or {}).get('expected')} steps updated)"
                )
            if result.get("eval_status") == "failed":  # trained; its after-training evaluation failed
                error = (result.get("eval_error") or "").splitlines()[:1]
                st.detail = "; ".join(
                    [*([st.detail] if st.detail else []), f"evaluation failed ({''.join(error)[:160]})"]
                )
                st.tail = [f"retry only the evaluation: {result.get('eval_retry')}"]
            return st
        st.state, st.detail = "failed", f"result.json status {status!r} {result.get('error', '')}".strip()
        st.tail = stderr_tail(job)
        return st
    submit_error = C.read_json(d / C.SUBMIT_ERROR_FILE)
    if submit_error is not None:
        lines = (submit_error.get("message") or "").strip().splitlines()
        st.state, st.detail = "failed", "submission refused: " + (lines[0] if lines else "(no message)")
        st.tail = lines[1:][-12:]
        return st
    if jobs_unreadable:
        st.state, st.detail = "unknown", "cannot tell which job ran it"
        return st
    if job is None:
        st.detail = "not submitted"
        return st
    job_error = C.read_json(d / C.JOB_ERROR_FILE)
    out_again = job.get("executor") == "slurm" and (slurm or {}).get(job["job_id"]) in _PENDING + _RUNNING
    if job_error is not None and not out_again:  # a requeued job's later attempt runs: not its earlier error
        st.state, st.detail = "failed", job_error.get("error", "job raised")
        st.tail = "".join(job_error.get("traceback", [])).splitlines()[-8:]
        if _job_paths(job).stderr.exists():
            st.tail.append(f"(full log: {_job_paths(job).stderr})")
        return st

    interrupted = C.read_json(d / "interrupted.json")
    if (
        interrupted is not None
        and interrupted.get("time", 0) >= float(job.get("submitted_at") or 0)
        and not rundir.is_locked(d)
    ):
        st.state, st.detail = "pending", "interrupted (Ctrl-C of its sweep); resubmitting resumes from its checkpoint"
        st.interrupted = True
        return st
    executor = job.get("executor")
    if executor == "slurm":
        if slurm is None:
            st.state, st.detail = "unknown", "sacct unavailable: cannot ask the scheduler"
            return st
        raw = slurm.get(job["job_id"])
        if raw is None:
            st.detail = "submitted; not in accounting yet"
            return st
        if raw in _PENDING:
            st.state, st.detail = "pending", raw
            return st
        if raw in _RUNNING:
            st.state, st.detail = "running", raw
            return st
        err = _submitit_error(job)
        st.state = "failed"
        st.detail = raw if raw != "COMPLETED" else "job completed without writing result.json"
        if err:
            st.detail += ": " + err.strip().splitlines()[-1]
        st.tail = stderr_tail(job)
        return st
    if rundir.is_locked(d):  # a live trainer holds the run directory (any executor, any host sharing the FS)
        st.state, st.detail = "running", rundir.describe(rundir.read_holder(d) or {})
        return st
    if executor == "local" and job.get("host", socket.gethostname()) != socket.gethostname():
        st.state = "unknown"
        st.detail = f"local job {job['job_id']} on host {job['host']}: its process cannot be checked from here"
        return st
    if executor == "local" and _pid_alive(job["job_id"], job.get("submitted_at")):
        st.state, st.detail = "running", f"pid {job['job_id']}"
        return st
    err = _submitit_error(job)
    st.state = "failed"
    st.detail = err.strip().splitlines()[-1] if err else "job ended without writing result.json"
    st.tail = stderr_tail(job)
    return st


# ---------------------------------------------------------------------------------------------- many cells
def statuses(dirs: list[Path]) -> list[CellStatus]:
    """Status of each cell directory, with one sacct call for all slurm jobs still out."""
    slurm_ids = []
    for d in dirs:
        try:
            job = C.last_job(d)
        except ValueError:  # cell_status reports it
            continue
        if job and job.get("executor") == "slurm" and not (Path(d) / C.RESULT_FILE).exists():
            slurm_ids.append(job["job_id"])
    slurm = sacct_states(slurm_ids) if slurm_ids else {}
    return [cell_status(d, slurm) for d in dirs]


def not_submitted(cell: Cell, runs_dir: Path) -> CellStatus:
    """A cell of the spec whose directory is not written yet."""
    return CellStatus(C.cell_dir(runs_dir, cell), cell.id, cell.alias, "pending", detail="not submitted")


def cell_statuses(cells: list[Cell], runs_dir: Path) -> list[CellStatus]:
    """Status of each of ``cells`` under ``runs_dir``, in their order; a cell not written yet is pending."""
    dirs = [C.cell_dir(runs_dir, c) for c in cells]
    have = [d for d in dirs if (d / C.CELL_FILE).exists()]
    by_dir = {r.dir: r for r in statuses(have)} if have else {}
    return [by_dir.get(d) or not_submitted(c, runs_dir) for c, d in zip(cells, dirs)]


def sweep_status(runs_dir: Path) -> list[CellStatus]:
    return statuses(C.list_cell_dirs(runs_dir))


def counts(rows: list[CellStatus]) -> Counter:
    return Counter(r.state for r in rows)


def is_active(st: CellStatus) -> bool:
    """A job of this cell is still out (queued or running): do not submit it again. An interrupted cell's job
    has ended (it holds a job id but nothing runs it), so it is resubmitted."""
    return st.job_id is not None and st.state in ("pending", "running", "unknown") and not st.interrupted


def format_table(rows: list[CellStatus], tails: bool = True) -> str:
    """One row per cell; failures followed by their stderr / traceback tail."""
    if not rows:
        return "(no cells)"
    wa = max(5, *(len(r.alias) for r in rows))
    wj = max(3, *(len(r.job_id or "-") for r in rows))
    out = [f"{'state':8} {'cell':{wa}} {'id':12} {'job':{wj}} detail"]
    for r in rows:
        out.append(f"{r.state:8} {r.alias:{wa}} {r.id:12} {r.job_id or '-':{wj}} {r.detail}".rstrip())
        if r.tail and (tails and r.state == "failed" or r.state == "done"):  # done: its evaluation's retry command
            out += [f"    | {line}" for line in r.tail]
    return "\n".join(out)


def summary_line(rows: list[CellStatus]) -> str:
    c = counts(rows)
    return f"{len(rows)} cells: " + ", ".join(f"{s} {c[s]}" for s in STATES if c[s] or s in ("done", "failed"))
