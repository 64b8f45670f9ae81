"""Provenance of a result: which code, packages, data and machine produced it (issue 22).

``collect(datasets=[...])`` returns the ``provenance`` object that result files carry::

    {"git_commit": "<40 hex>" | None, "git_dirty": bool | None, "git_diff_sha256": "<64 hex>" | None,
     "untracked": ["methods/my_method.py", ...] | None,
     "packages": {"torch": "2.13.0+cpu", "transformers": ..., "vllm": None, ...},
     "datasets": [{"name", "source", "revision", "sha256", "rows"}, ...],
     "hardware": {"cpu": "<model>", "cpu_count": 16, "gpu": "<model>" | None, "gpu_count": 0,
                  "cuda_visible_devices": None, "platform": "Linux 6.8; python 3.12.3"},
     "created": "2026-12-04T10:00:00Z"}

Decisions:

* Cheap and side-effect free: versions come from ``importlib.metadata`` (no package is imported), git runs as a
  subprocess with a short timeout, GPUs are read from ``/proc/driver/nvidia/gpus`` (else ``nvidia-smi``): CUDA is
  never initialised, so a later ``fork`` or a vLLM engine is not disturbed.
* ``git_commit``/``git_dirty`` are of the checkout the running ``harness`` package was imported from, and only
  when that directory is the top of a git work tree: an installed package (site-packages, perhaps inside some
  other repository's virtualenv) gets ``None``, as does a machine without git. ``git_dirty`` counts changes to
  tracked files and untracked files under the code folders (``CODE_FOLDERS``: a method added in a new file, the
  README's way to add one, makes the tree dirty); run outputs and other untracked files do not.
  ``git_diff_sha256`` hashes what makes it dirty (``git diff HEAD --binary``, then each untracked code file's path
  and bytes), so two dirty trees can be told apart; ``untracked`` lists those files.
* A run is stamped when it starts (``stamp_run``: ``RUN/provenance.json`` holds the run id, its config and the
  code state, written once and kept through resumes); ``for_run`` gives its result's provenance with the code
  state of the start, and ``resumed_under`` lists each resume under other code (never silently restamped).
* Every package of ``PACKAGES`` is always a key; an absent package is ``None`` (looked up, not installed), so a
  reader can tell "not installed" from "not recorded". ``harness`` is the installed ``entropy-harness``
  distribution's version (``None`` when running from a source tree that was never installed).
* ``gpu``/``gpu_count`` describe the GPUs installed in the machine (mixed models are joined with " + ");
  ``cuda_visible_devices`` records the process's restriction as set, since which of them a job used is the
  launcher's business.
* ``dataset_entry`` hashes what was read: a file's bytes, or rows as canonical JSON lines
  (``json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)`` + ``"\\n"`` each),
  so the same rows hash the same whatever their key order.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

# provenance key -> distribution name looked up with importlib.metadata
PACKAGES = {
    "torch": "torch",
    "transformers": "transformers",
    "vllm": "vllm",
    "lm-eval": "lm_eval",
    "math-verify": "math-verify",
    "harness": "entropy-harness",
}
GIT_TIMEOUT_S = 5.0
# the project's code folders: an untracked file under one of them changes what a run runs (makes the tree dirty)
CODE_FOLDERS = ("harness", "methods", "baselines", "evals", "sweeps", "scripts")
STAMP_FILE = "provenance.json"  # in a run directory: its start stamp (stamp_run)
CODE_KEYS = ("git_commit", "git_dirty", "git_diff_sha256", "untracked")
_PROC_GPUS = Path("/proc/driver/nvidia/gpus")


def collect(datasets: Iterable[Mapping] = (), code: Mapping | None = None) -> dict:
    """The provenance object (see the module docstring); ``datasets`` are ``dataset_entry`` results; ``code`` the
    code state to record (default: the checkout's now)."""
    code = code_state() if code is None else {k: code.get(k) for k in CODE_KEYS}
    return {
        **code,
        "packages": package_versions(),
        "datasets": [_check_entry(d) for d in datasets],
        "hardware": hardware(),
        "created": _now(),
    }


def dataset_entry(
    name: str,
    path_or_rows: str | os.PathLike | Iterable[Mapping],
    revision: str | None = None,
    source: str | None = None,
    role: str | None = None,
) -> dict:
    """``{"name", "source", "revision", "sha256", "rows"}`` (and ``role``: ``train`` or ``eval``, when given) of the
    data a result read. Readers compare data per (role, name): a run's training data is never compared with the
    test problems an eval of it read, though both carry the task's name.

    A path hashes the file's bytes (``rows`` None; ``source`` defaults to the path); rows (dicts) hash as
    canonical JSON lines (``rows`` = their count). ``revision`` is the hub revision the data was pinned to, or
    None (a local file is identified by its hash)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"dataset_entry: name must be a non-empty string, got {name!r}")
    if isinstance(path_or_rows, (str, os.PathLike)):
        path = Path(path_or_rows)
        if not path.is_file():
            raise FileNotFoundError(f"dataset_entry {name!r}: no such file {path}")
        digest, n_rows = file_sha256(path), None
        source = source if source is not None else str(path)
    else:
        digest, n_rows = rows_sha256(path_or_rows)
    entry = {"name": name, "source": source, "revision": revision, "sha256": digest, "rows": n_rows}
    return {**entry, "role": role} if role else entry


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rows_sha256(rows: Iterable[Mapping]) -> tuple[str, int]:
    """sha256 of the rows as canonical JSON lines, and their count."""
    h = hashlib.sha256()
    n = 0
    for row in rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"dataset rows must be mappings (dicts), got {type(row).__name__} at row {n}")
        line = json.dumps(dict(row), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
        h.update(line.encode("utf-8") + b"\n")
        n += 1
    return h.hexdigest(), n


def _check_entry(d: Mapping) -> dict:
    if not isinstance(d, Mapping) or not d.get("name") or not isinstance(d.get("sha256"), str):
        raise ValueError(f"provenance datasets take dataset_entry(...) results (name, sha256, ...), got {d!r}")
    return dict(d)


def package_versions() -> dict[str, str | None]:
    """``PACKAGES`` and the distributions the backends run on (``Backend.packages``) -> installed version or None."""
    from harness.backends import provenance_packages  # the backend registry (no backend's heavy code)

    out: dict[str, str | None] = {}
    for key, dist in {**PACKAGES, **{p: p for p in provenance_packages()}}.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="surrogateescape",  # a diff of non-UTF-8 bytes hashes as those bytes
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git binary, timeout, unreadable cwd
        return None
    return r.stdout if r.returncode == 0 else None


def source_root() -> Path:
    """The directory above the imported ``harness`` package (a checkout's top, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def git_state(root: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the work tree whose top is ``root`` (default: the harness checkout); (None, None)
    when ``root`` is not the top of a git work tree or git is unavailable."""
    state = code_state(root)
    return state["git_commit"], state["git_dirty"]


def code_state(root: str | os.PathLike | None = None) -> dict:
    """``{git_commit, git_dirty, git_diff_sha256, untracked}`` of the checkout (see the module docstring); all
    None when ``root`` is not the top of a git work tree or git is unavailable."""
    none = dict.fromkeys(CODE_KEYS)
    root = Path(root) if root is not None else source_root()
    top = _git(["rev-parse", "--show-toplevel"], root)
    if top is None or Path(top.strip()).resolve() != root.resolve():
        return none
    commit = _git(["rev-parse", "HEAD"], root)
    if commit is None:  # a repository without commits
        return none
    status = _git(["status", "--porcelain", "--untracked-files=no"], root)
    listed = _git(["ls-files", "-z", "--others", "--exclude-standard", "--", *CODE_FOLDERS], root)
    untracked = sorted(x for x in (listed or "").split("\0") if x)
    if status is None or listed is None:
        return {**none, "git_commit": commit.strip()}
    dirty = bool(status.strip()) or bool(untracked)
    digest = None
    if dirty:
        h = hashlib.sha256((_git(["diff", "HEAD", "--binary"], root) or "").encode("utf-8", "surrogateescape"))
        for rel in untracked:
            try:
                h.update(b"\0" + rel.encode() + b"\0" + file_sha256(root / rel).encode())
            except OSError:  # gone since listed, or unreadable: its name still counts
                h.update(b"\0" + rel.encode() + b"\0?")
        digest = h.hexdigest()
    return {"git_commit": commit.strip(), "git_dirty": dirty, "git_diff_sha256": digest, "untracked": untracked}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_stamp(run_dir: str | os.PathLike) -> dict | None:
    """``RUN/provenance.json`` (the start stamp), None when absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stamp_run(run_dir: str | os.PathLike, run_id: str, config: Mapping, log=None) -> dict:
    """Stamp the run at its start: write ``RUN/provenance.json`` (run id, resolved config, code state, time) when
    absent or of another run; when present, keep it and, if the code differs from the stamp's, append the code
    of this resume to its ``resumed_under`` (and say so through ``log``). Returns the stamp."""
    from harness.io import atomic_write_json

    now = code_state()
    stamp = read_stamp(run_dir)
    if stamp is None or stamp.get("run_id") != run_id:
        stamp = {"run_id": run_id, "started": _now(), "code": now, "config": dict(config), "resumed_under": []}
        atomic_write_json(Path(run_dir) / STAMP_FILE, stamp)
        return stamp
    started = stamp.get("code") or {}
    if all(started.get(k) == now.get(k) for k in ("git_commit", "git_dirty", "git_diff_sha256")):
        return stamp
    stamp.setdefault("resumed_under", []).append({**now, "at": _now()})
    atomic_write_json(Path(run_dir) / STAMP_FILE, stamp)
    if log is not None:
        log(
            f"warning: resuming run {run_id} under other code than it started with ({_code_text(started)} at "
            f"its start, {_code_text(now)} now); recorded in result.json provenance.resumed_under"
        )
    return stamp


def _code_text(code: Mapping) -> str:
    commit = code.get("git_commit")
    if not commit:
        return "no git checkout"
    dirty = code.get("git_dirty")
    return commit[:7] + (f"+dirty {str(code.get('git_diff_sha256'))[:8]}" if dirty else "")


def for_run(run_dir: str | os.PathLike, datasets: Iterable[Mapping] = ()) -> dict:
    """The provenance of a finished run: ``collect`` now (packages, data, hardware), with the code state of the
    run's start stamp (``started``) and ``resumed_under`` (each resume under other code); without a stamp, the
    code of now."""
    stamp = read_stamp(run_dir)
    prov = collect(datasets, None if stamp is None else stamp.get("code") or {})
    if stamp is not None:
        prov["started"] = stamp.get("started")
        prov["resumed_under"] = list(stamp.get("resumed_under") or [])
    return prov


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")) and ":" in line:
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def gpu_models() -> list[str]:
    """Model names of the NVIDIA GPUs installed (the driver's /proc files, else nvidia-smi); [] when none."""
    names = []
    if _PROC_GPUS.is_dir():
        for info in sorted(_PROC_GPUS.glob("*/information")):
            try:
                for line in info.read_text(errors="replace").splitlines():
                    if line.startswith("Model:"):
                        names.append(line.split(":", 1)[1].strip())
                        break
            except OSError:
                continue
    if names:
        return names
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()] if r.returncode == 0 else []


def hardware() -> dict:
    gpus = gpu_models()
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu": " + ".join(dict.fromkeys(gpus)) if gpus else None,
        "gpu_count": len(gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "platform": f"{platform.system()} {platform.release()}; python {sys.version.split()[0]}",
    }
