"""Run untrusted Python programs: one fresh ``python -I`` per program, isolated, limited, killed on timeout.

Per program (see ``_sandbox_launcher.py`` for the set-up order): own empty directory, new mount/network/PID/
IPC/UTS namespaces, a chroot made of read-only system binds + a private /tmp, resource limits (address space,
CPU, file size, open files, processes), an unprivileged uid (one per worker slot, so concurrent programs
cannot touch each other's files or processes; root ignores the limits otherwise), a scrubbed environment,
a wall-clock timeout that SIGKILLs the whole process group (and the PID namespace dies with its init), and
capped captured output. As a normal user it uses a user namespace where the kernel allows one and reports
what is missing in ``Sandbox.isolation``/``Sandbox.missing``.

Differs from human-eval / evalplus / LiveCodeBench, which ``exec`` in a ``multiprocessing`` child with
monkey-patched ``os`` functions ("NOT a security sandbox"): here the program never shares an interpreter
with the grader, and a pass needs a nonce-tagged report written after the tests completed.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "_sandbox_launcher.py"
RUNNER = HERE / "_sandbox_runner.py"


def _world_executable(path: str) -> bool:
    """True when every directory on the way and the file itself are usable by any user."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts)):
        d = "/".join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return False
    return bool(os.stat(real).st_mode & 0o005 == 0o005)


def default_python() -> str:
    """HARNESS_SANDBOX_PYTHON, else the system python3, else this interpreter if others may run it."""
    env = os.environ.get("HARNESS_SANDBOX_PYTHON")
    if env:
        return env
    for cand in ("/usr/bin/python3", sys.executable):
        if cand and os.path.isfile(cand) and (os.geteuid() != 0 or _world_executable(cand)):
            return cand
    return "/usr/bin/python3"


DEFAULT_RO_PATHS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/etc")
UID_BASE = int(os.environ.get("HARNESS_SANDBOX_UID_BASE", "61000"))
UID_BLOCK = 64  # uids per Sandbox instance (max workers)
UID_BLOCKS = 64  # concurrent Sandbox instances per machine
LOCK_DIR = (
    "/run/harness-sandbox-uids" if os.path.isdir("/run") and os.access("/run", os.W_OK) else "/tmp/harness-sandbox-uids"
)
SETUP_FAILED = 97


@dataclass
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    fsize_mb: int = 16
    nofile: int = 64
    nproc: int = 32
    output_bytes: int = 64 << 10  # kept of stdout/stderr each; the rest is counted and dropped
    output_kill_bytes: int = 16 << 20  # a program printing more than this is killed ("output limit")
    tmpfs_mb: int = 64


@dataclass
class ExecResult:
    status: str  # completed (the runner reported) | failed (no report) | timeout | error
    detail: str
    report: dict | None = None
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    isolation: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class SandboxSetupError(RuntimeError):
    """The sandbox could not be set up (e.g. the interpreter is not readable by the sandbox uid)."""


class Sandbox:
    """Runs programs; ``run`` is thread-safe, ``run_many`` uses a thread pool of ``workers``."""

    def __init__(
        self,
        python: str | None = None,
        limits: Limits | None = None,
        workers: int | None = None,
        ro_paths: Sequence[str] = (),
        strict: bool | None = None,
    ):
        self.python = python or default_python()
        if not os.path.isfile(self.python):
            raise FileNotFoundError(
                f"sandbox interpreter {self.python} does not exist; set --sandbox-python "
                "or HARNESS_SANDBOX_PYTHON to a python3 readable by an unprivileged user"
            )
        self.limits = limits or Limits()
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.is_root = os.geteuid() == 0
        self.strict = self.is_root if strict is None else strict
        if self.workers > UID_BLOCK:
            raise ValueError(f"at most {UID_BLOCK} sandbox workers, got {self.workers}")
        self._uid_lock = None
        self.uid_base = self._claim_uid_block() if self.is_root else None
        self.ro_paths = list(DEFAULT_RO_PATHS) + [p for p in ro_paths if p not in DEFAULT_RO_PATHS]
        # the interpreter's prefix must be visible inside the chroot; for a venv both the venv (site-packages)
        # and the base interpreter it links to
        for exe in (os.path.abspath(self.python), os.path.realpath(self.python)):
            prefix = os.path.dirname(os.path.dirname(exe))
            if not any(prefix == p or prefix.startswith(p + "/") for p in self.ro_paths):
                self.ro_paths.append(prefix)
        self._base = Path(tempfile.mkdtemp(prefix="harness-sandbox-"))
        os.chmod(self._base, 0o711)
        # removes the directory and releases the uid block also for sandboxes never closed (module globals)
        self._finalizer = weakref.finalize(self, _cleanup, str(self._base), self._uid_lock)
        (self._base / "root").mkdir()
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(self.workers):
            self._slots.put(i)
        self._counter = 0
        self._lock = threading.Lock()
        self.isolation: dict = {}
        probe = self.run({"prog.py": "print('ok')"}, {"mode": "script"})
        self.isolation = probe.isolation
        if probe.status != "completed" or not (probe.report or {}).get("ok"):
            self.close()
            raise SandboxSetupError(f"sandbox self-test failed ({probe.status}): {probe.detail} {probe.stderr[-500:]}")

    # -- public ---------------------------------------------------------------------------------------
    @property
    def missing(self) -> list[str]:
        """Isolation features that are NOT in effect (empty when fully isolated)."""
        iso = self.isolation
        out = []
        if iso.get("network") != "private":
            out.append("network namespace (programs can reach the network)")
        if iso.get("pid") != "private":
            out.append("PID namespace (programs can see/signal other processes of the same user)")
        if iso.get("filesystem") != "chroot":
            out.append("filesystem isolation (programs can read/write what the user can, including /tmp)")
        user = str(iso.get("user", ""))
        if user == "user-namespace":
            out.append(
                "separate uid (programs run as the grading user, confined to their user/PID/mount "
                "namespaces; rlimits apply)"
            )
        elif not user.startswith("uid"):
            out.append(
                "unprivileged uid"
                + (
                    " (running as root: limits are not enforced)"
                    if self.is_root
                    else " (programs run as the grading user)"
                )
            )
        return out

    def describe(self) -> str:
        m = self.missing
        return "sandbox: full isolation" if not m else "sandbox: MISSING " + "; ".join(m)

    def run(self, files: dict[str, str], job: dict, limits: Limits | None = None) -> ExecResult:
        """Run one program. ``files`` are written into its empty directory; ``job`` goes to the runner."""
        lim = limits or self.limits
        slot = self._slots.get()
        try:
            return self._run(slot, files, job, lim)
        finally:
            self._slots.put(slot)

    def run_many(
        self, items: Sequence[tuple[dict, dict]], progress: bool = False, desc: str = "sandbox"
    ) -> list[ExecResult]:
        with ThreadPoolExecutor(self.workers) as ex:
            futs = [ex.submit(self.run, f, j) for f, j in items]
            if progress:
                from tqdm.auto import tqdm

                futs = tqdm(futs, desc=desc, leave=False)
            return [f.result() for f in futs]

    def close(self) -> None:
        self._finalizer()

    def _claim_uid_block(self) -> int:
        """A block of uids no other live Sandbox (any process on this machine) uses: a flock per block.

        Two graders sharing a uid would share RLIMIT_NPROC and kill each other's programs in the clean-up."""
        import fcntl

        os.makedirs(LOCK_DIR, mode=0o755, exist_ok=True)
        for block in range(UID_BLOCKS):
            f = open(os.path.join(LOCK_DIR, f"{block}.lock"), "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self._uid_lock = f
            return UID_BASE + block * UID_BLOCK
        raise SandboxSetupError(f"all {UID_BLOCKS} sandbox uid blocks are in use (locks in {LOCK_DIR})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals ------------------------------------------------------------------------------------
    def _uid(self, slot: int) -> int | None:
        return self.uid_base + slot if self.uid_base is not None else None

    def _run(self, slot: int, files: dict[str, str], job: dict, lim: Limits) -> ExecResult:
        uid = self._uid(slot)
        with self._lock:
            self._counter += 1
            work = self._base / f"p{self._counter}"
        work.mkdir(mode=0o700)
        try:
            for name, text in files.items():
                (work / name).write_text(text)
            (work / ".runner.py").write_text(RUNNER.read_text())
            if uid is not None:
                for p in [work, *work.iterdir()]:
                    os.chown(p, uid, uid)
                os.chown(work / ".runner.py", 0, 0)
                os.chmod(work / ".runner.py", 0o444)
                _kill_uid(uid)  # leftovers of an earlier program in this slot (should be none)
            return self._execute(work, uid, job, lim)
        finally:
            if uid is not None:
                _kill_uid(uid)
            shutil.rmtree(work, ignore_errors=True, onerror=None)
            if work.exists():
                _force_rmtree(work)

    def _execute(self, work: Path, uid: int | None, job: dict, lim: Limits) -> ExecResult:
        nonce = secrets.token_hex(16)
        r_fd, w_fd = os.pipe()
        cfg = {
            "root_mount": str(self._base / "root"),
            "workdir": str(work),
            "uid": uid,
            "gid": uid,
            "limits": {
                "memory_mb": lim.memory_mb,
                "fsize_mb": lim.fsize_mb,
                "nofile": lim.nofile,
                "cpu_s": int(lim.cpu_s),
                "nproc": lim.nproc,
            },
            "tmpfs_mb": lim.tmpfs_mb,
            "ro_paths": self.ro_paths,
            "result_fd": w_fd,
            "require": ["network", "pid", "filesystem", "user"] if self.strict else [],
            "argv": [self.python, "-I", ".runner.py"],
            "env": {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "HOME": "/sandbox",
                "TMPDIR": "/tmp",
                "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1",
            },
        }
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(w_fd,),
            start_new_session=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        os.close(w_fd)
        payload = (json.dumps({**job, "nonce": nonce}) + "\n").encode()
        writer = threading.Thread(target=_write_all, args=(proc.stdin, payload), daemon=True)
        writer.start()
        out, killed_for = _collect(proc, r_fd, t0 + lim.wall_s, lim)
        wall = time.monotonic() - t0
        try:  # normally the program is done: let the launcher reap it and exit by itself
            rc = proc.wait(timeout=5 if killed_for else 2)
        except subprocess.TimeoutExpired:
            _kill_sandbox(proc.pid)
            try:
                rc = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _killpg(proc.pid)
                rc = proc.wait()
        _killpg(proc.pid)  # anything left in the group (the launcher has been reaped: no orphan zombies)
        writer.join(timeout=1)
        stdout = out["stdout"].decode("utf-8", "replace")
        stderr = out["stderr"].decode("utf-8", "replace")
        isolation, report = _parse_results(out["result"].decode("utf-8", "replace"), nonce)
        res = ExecResult("error", "", report, rc, stdout, stderr, wall, isolation)
        if killed_for == "timeout":
            res.status, res.detail = "timeout", f"wall-clock limit {lim.wall_s:g}s"
        elif killed_for == "output":
            res.status, res.detail = "error", f"output limit {lim.output_kill_bytes} bytes exceeded"
        elif rc == SETUP_FAILED and not isolation:
            res.detail = "sandbox setup failed: " + stderr.strip()[-300:]
        elif rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU) or (rc in (-9, 137) and wall >= lim.cpu_s * 0.9):
            res.status, res.detail = "timeout", f"CPU limit {lim.cpu_s}s"
        elif report is None:
            res.status = "failed"
            res.detail = (
                "exited before the tests finished (no report)"
                if rc == 0
                else f"crashed with exit status {rc}: " + _last_line(stderr)
            )
        else:
            res.status, res.detail = "completed", ""
        return res


def _cleanup(base: str, lock_file) -> None:
    shutil.rmtree(base, ignore_errors=True)
    if lock_file is not None:
        lock_file.close()  # releases the flock on the uid block


def _write_all(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _collect(proc, r_fd: int, deadline: float, lim: Limits) -> tuple[dict, str | None]:
    """Read stdout, stderr and the result pipe until EOF, the deadline, or an output flood."""
    sel = selectors.DefaultSelector()
    bufs = {"stdout": bytearray(), "stderr": bytearray(), "result": bytearray()}
    totals = dict.fromkeys(bufs, 0)
    caps = {"stdout": lim.output_bytes, "stderr": lim.output_bytes, "result": 8 << 20}
    result_file = os.fdopen(r_fd, "rb", buffering=0)
    for name, f in (("stdout", proc.stdout), ("stderr", proc.stderr), ("result", result_file)):
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ, name)
    killed_for = None
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                killed_for = "timeout"
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                name = key.data
                try:
                    chunk = os.read(key.fileobj.fileno(), 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                totals[name] += len(chunk)
                room = caps[name] - len(bufs[name])
                if room > 0:
                    bufs[name] += chunk[:room]
                if name != "result" and totals[name] > lim.output_kill_bytes:
                    killed_for = "output"
            if killed_for:
                break
    finally:
        sel.close()
        if killed_for:
            _kill_sandbox(proc.pid)
        result_file.close()
    return {k: bytes(v) for k, v in bufs.items()}, killed_for


def _parse_results(text: str, nonce: str) -> tuple[dict, dict | None]:
    isolation, report = {}, None
    lines = text.splitlines()
    if lines and lines[0].startswith("ISOLATION "):  # written by the launcher before untrusted code ran
        try:
            isolation = json.loads(lines[0][len("ISOLATION ") :])
        except ValueError:
            pass
        lines = lines[1:]
    for line in lines:
        if line.startswith(nonce + " "):
            try:
                report = json.loads(line[len(nonce) + 1 :])
            except ValueError:
                report = None
    return isolation, report


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        kids = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    with open(f"/proc/{p}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            kids.append(int(p))
                except (OSError, ValueError, IndexError):
                    continue
        return kids


def _kill_sandbox(launcher_pid: int) -> None:
    """SIGKILL the program's PID-namespace init (the namespace dies with it) but not the launcher, which then
    reaps it and exits: killing the launcher first would leave the init as a zombie of the host's PID 1,
    counted against the slot uid's RLIMIT_NPROC for as long as that init does not reap it."""
    kids = _children(launcher_pid)
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if not kids:  # still setting up (no fork yet) or already gone
        try:
            os.kill(launcher_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid`` (escaped children of a sandboxed program)."""
    for _ in range(3):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    found = True
                    os.kill(int(pid), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        if not found:
            return
        time.sleep(0.01)


def _force_rmtree(path: Path) -> None:
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            try:
                os.chmod(os.path.join(root, d), 0o700)
            except OSError:
                pass
    shutil.rmtree(path, ignore_errors=True)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
