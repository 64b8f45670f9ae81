"""One Ray cluster over the nodes of a multi-node SLURM job (one task per node), for the OpenRLHF launcher.

Task 0 starts the head and runs the driver; every other task starts a worker node. Unlike the usual recipe
(``ray start --address=HEAD --block`` on workers, then ``ray stop``), which ends every successful run FAILED (a
blocked worker's ``ray start`` exits 1 once the head's Ray is gone) and stops every Ray on the host, the tasks meet
through marker files on the shared run directory, in a folder of their own attempt
(``<run_dir>/.cluster/<job>.<restart>.<start>/``: the same name in every task of one start of the job, another
after a requeue or on another cluster):

* ``head.addr``: the head's ``ip:port``, written once its ``ray start --head`` returned;
* ``head.alive``: a counter the head's launcher bumps every ``HEARTBEAT_S``;
* ``head.rc``: how the head's launcher ended (``completed``, ``requeue`` after the checkpoint its job asked for, or
  ``failed`` with the error), written *before* the head stops its node.

A worker waits for ``head.addr``, starts its node without ``--block``, then polls: ``head.rc`` completed or
requeue -> it stops its own node and exits 0; failed -> exits 3 (the head's error is the cell's); no ``head.rc``
but the head's GCS unreachable ``DEAD_AFTER`` polls in a row, or ``head.alive`` unchanged for ``HEAD_SILENT_S`` (a
launcher killed outright leaves its orphaned Ray daemons answering) -> exits 2 (the head died); its own raylet gone
-> exits 4.

Each node's IP is its slurm.conf ``NodeAddr`` (``scontrol show node``): a real cluster's address, and on the
one-machine test cluster a loopback address of its own (127.0.0.2, 127.0.0.3, ...). The head's port is a free one
outside Ray's worker-port range and SLURM's ports. Where several nodes of the job share a host (the rehearsal), each
node gets a block of Ray's worker ports of its own: raylets on one host hand out ports from the same default range
independently, and a worker that loses the race for one aborts (seen with five jobs on the test cluster). Each node
has its own short ``--temp-dir`` (``/tmp/hray-<uid>/<attempt>/<node>``; Ray's socket paths must stay under 108
characters), and a node is stopped by selecting the processes of that temp dir (``stop_node``), never with ``ray
stop``, which stops every Ray on the machine. Ray left on a node by an earlier attempt of the job or by a job that
no longer runs (``proctrack/linuxproc`` never kills Ray's daemons: they are orphans) is stopped before a node
starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

MARKERS = ".cluster"  # under the run directory
HEAD_ADDR, HEAD_RC, HEAD_ALIVE = "head.addr", "head.rc", "head.alive"
HEARTBEAT_S, HEAD_SILENT_S = 5.0, 120.0  # generous: a shared file system may cache what a worker reads for ~60 s
TMP_ENV = "HARNESS_RAY_TMP"  # root of the nodes' Ray temp dirs (default /tmp/hray-<uid>)
RAY_WORKER_PORTS = range(10002, 20000)  # Ray's default --min/--max-worker-port
WORKER_PORT_BLOCK = 500  # one node's share where several share a host
HEAD_PORTS = range(6380, 10000)  # below the worker ports, above the well-known ones
EXIT_HEAD_LOST, EXIT_HEAD_FAILED, EXIT_RAYLET_LOST = 2, 3, 4
WORKER_EXITS = {
    EXIT_HEAD_LOST: "the head task's Ray vanished without a head.rc (the head task died)",
    EXIT_HEAD_FAILED: "the head task's launcher failed (its error is the cell's: job_error.json / result.json)",
    EXIT_RAYLET_LOST: "this node's raylet died while the head was alive",
}
POLL_S, DEAD_AFTER = 1.0, 3
JOIN_TIMEOUT_S = 900.0  # a worker waits this long for the head's address; the head as long for every node


def log(msg: str) -> None:
    print(f"harness: ray cluster: {msg}", flush=True)


# ----------------------------------------------------------------------------------------------- the attempt
def scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def _field(text: str, key: str) -> str | None:
    return next((t.split("=", 1)[1] for t in text.split() if t.startswith(key + "=")), None)


class Attempt:
    """This task's place in one start of the SLURM job: rank, node, its IP (slurm.conf ``NodeAddr``), the head's, and
    the attempt's name."""

    def __init__(self, env=os.environ):
        self.job_id = env["SLURM_JOB_ID"]
        self.restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
        self.rank = int(env.get("SLURM_PROCID", "0") or 0)
        self.node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        self.nodes = scontrol("show", "hostnames", env["SLURM_JOB_NODELIST"]).split()
        started = _field(scontrol("show", "job", self.job_id, "-o"), "StartTime") or ""
        # job ids restart at 1 on a new cluster and a requeue keeps the id: the start time tells attempts apart
        self.name = f"{self.job_id}.{self.restart}.{hashlib.sha1(started.encode()).hexdigest()[:6]}"
        shown = {n: scontrol("show", "node", n, "-o") for n in self.nodes}
        self.ip = _field(shown[self.node], "NodeAddr") or self.node
        self.head_ip = _field(shown[self.nodes[0]], "NodeAddr") or self.nodes[0]
        self.shared_host = len({_field(t, "NodeHostName") for t in shown.values()}) < len(self.nodes)
        self.temp_dir = tmp_root() / self.name / self.node

    def worker_port_flags(self) -> list[str]:
        """Ray's worker-port range of this node: the default on a host of its own; where several nodes of the job
        share a host, a block of its own (consecutive jobs of one size get consecutive blocks)."""
        if not self.shared_host:
            return []
        blocks = len(RAY_WORKER_PORTS) // WORKER_PORT_BLOCK
        index = self.nodes.index(self.node)
        lo = RAY_WORKER_PORTS.start + ((int(self.job_id) * len(self.nodes) + index) % blocks) * WORKER_PORT_BLOCK
        return [f"--min-worker-port={lo}", f"--max-worker-port={lo + WORKER_PORT_BLOCK - 1}"]


def tmp_root() -> Path:
    return Path(os.environ.get(TMP_ENV) or f"/tmp/hray-{os.getuid()}")


def marker_dir(run_dir: Path, attempt: Attempt) -> Path:
    return Path(run_dir) / MARKERS / attempt.name


def _write_marker(path: Path, payload: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def read_marker(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------- ports, Ray CLI
def slurm_ports() -> set[int]:
    """The ports SLURM's daemons use (slurmctld, slurmd, slurmdbd, and every node's own ``Port=``)."""
    ports: set[int] = set()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        for line in scontrol("show", "config").splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("SlurmctldPort", "SlurmdPort", "AccountingStoragePort"):
                lo, _, hi = value.strip().partition("-")
                if lo.isdigit():
                    ports.update(range(int(lo), int(hi or lo) + 1))
        for line in scontrol("show", "node", "-o").splitlines():
            port = _field(line, "Port")
            if port and port.isdigit():
                ports.add(int(port))
    return ports


def free_port(avoid: set[int], seed: int) -> int:
    """A port of ``HEAD_PORTS`` nobody listens on (on any address: Ray's GCS binds them all), not in ``avoid``;
    the search starts at ``seed`` so that jobs on one node spread out."""
    n = len(HEAD_PORTS)
    for i in range(n):
        port = HEAD_PORTS[(seed + i) % n]
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {HEAD_PORTS.start}-{HEAD_PORTS.stop - 1} for the Ray head")


def gcs_up(address: str, timeout_s: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def ray_cli() -> str:
    """The ``ray`` command of this interpreter's environment."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


def _ray_start(args: list[str], attempt: Attempt, resources: list[str], out: Path) -> None:
    """``ray start ...`` (never ``--block``) for this task's node; RuntimeError with its output when it fails."""
    attempt.temp_dir.mkdir(parents=True, exist_ok=True)
    cmd = [ray_cli(), "start", *args, f"--node-ip-address={attempt.ip}", f"--temp-dir={attempt.temp_dir}"]
    cmd += [*attempt.worker_port_flags(), *resources, "--disable-usage-stats"]
    with open(out, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{out.read_text()[-2000:]}")


# ----------------------------------------------------------------------------------------------- stopping a node
def node_processes(temp_dir: Path, client_address: str | None = None) -> list:
    """The processes of the Ray node that runs in ``temp_dir``: the daemons naming it (gcs_server, raylet, agents, log
    monitor), renamed ``ray::*`` processes that hold a file open under it (agents orphaned by a dead raylet), the
    head's client server (``ray.util.client.server --address=<client_address>``, which names no temp dir), and all
    their descendants (actors). Never this process or its ancestors."""
    import psutil

    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    under = str(temp_dir).rstrip("/") + "/"
    names_it = re.compile(re.escape(under[:-1]) + r"(?=[/\s,'\"]|$)")  # .../n1 but not .../n10
    roots = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info["cmdline"] or []
        if p.pid in spared or not argv:
            continue
        if names_it.search(" ".join(argv)):
            roots.append(p)
        elif client_address and "ray.util.client.server" in argv and f"--address={client_address}" in argv:
            roots.append(p)
        elif argv[0].startswith("ray::"):
            with contextlib.suppress(OSError):
                fds = [os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{p.pid}/fd")]
                if any(f.startswith(under) for f in fds):
                    roots.append(p)
    found = {}
    for r in roots:
        found[r.pid] = r
        with contextlib.suppress(psutil.Error):
            found.update({c.pid: c for c in r.children(recursive=True)})
    return [p for pid, p in found.items() if pid not in spared]


def stop_node(temp_dir: Path, client_address: str | None = None, grace_s: float = 10.0) -> tuple[int, int]:
    """Stop one Ray node (``node_processes``) in ``ray stop``'s order: raylet first, gcs_server last; SIGTERM, then
    SIGKILL after ``grace_s / 3`` per group. Returns (processes found, processes that needed SIGKILL)."""
    import psutil

    procs = node_processes(Path(temp_dir), client_address)

    def name(p) -> str:
        try:
            return p.name()
        except psutil.Error:
            return ""

    groups = [
        [p for p in procs if name(p) == "raylet"],
        [p for p in procs if name(p) not in ("raylet", "gcs_server")],
        [p for p in procs if name(p) == "gcs_server"],
    ]
    killed = 0
    for group in groups:
        for p in group:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(group, timeout=grace_s / 3)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
                killed += 1
        psutil.wait_procs(alive, timeout=2)
    return len(procs), killed


def stop_stale(attempt: Attempt) -> None:
    """Stop (and remove) the Ray temp dirs of this node left by another attempt of this job or by a job that is no
    longer running."""
    root = tmp_root()
    mine = [d for d in root.glob(f"*/{attempt.node}") if d != attempt.temp_dir]
    if not mine:
        return
    other_jobs = {d.parent.name.split(".")[0] for d in mine} - {attempt.job_id}
    running = set()
    if other_jobs:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["squeue", "-h", "-o", "%A", "-j", ",".join(sorted(other_jobs))], capture_output=True, text=True
            ).stdout
            running = set(out.split())
    for d in mine:
        job = d.parent.name.split(".")[0]
        if job != attempt.job_id and job in running:
            continue
        found, killed = stop_node(d, grace_s=3)
        if found:
            log(f"stopped {found} Ray processes left in {d} by an earlier attempt or job ({killed} needed SIGKILL)")
        shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(OSError):
            d.parent.rmdir()  # the attempt's folder, once its last node is gone


# ----------------------------------------------------------------------------------------------- head
class Head:
    """Task 0, as a context manager: entering starts the head (``address``); then ``ray.init(address=...)`` and
    ``wait_for_nodes()``; leaving shuts this process's Ray client down, writes head.rc (``status``: ``completed``
    when the block ended normally unless set, e.g. to ``requeue``; ``failed`` with the error when it raised) and
    stops this node."""

    def __init__(self, run_dir: Path, resources: list[str]):
        self.attempt = Attempt()
        self.resources = resources
        self.markers = marker_dir(run_dir, self.attempt)
        self.address: str | None = None
        self.status: str | None = None
        self._beating = threading.Event()  # set: the heartbeat stops

    def __enter__(self) -> Head:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        import ray

        error = ""
        if exc_type is not None:
            text = str(exc).strip()
            error = f"{exc_type.__name__}: {text.splitlines()[-1] if text else ''}"
            self.status = self.status or ("interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed")
        if ray.is_initialized():
            ray.shutdown()
        self.stop(self.status or "completed", error)
        return False

    def start(self) -> str:
        a = self.attempt
        stop_stale(a)
        for old in self.markers.parent.glob("*"):  # earlier attempts' markers: never read as this attempt's
            if old != self.markers:
                shutil.rmtree(old, ignore_errors=True)
        self.markers.mkdir(parents=True, exist_ok=True)
        for f in (HEAD_ADDR, HEAD_RC):
            (self.markers / f).unlink(missing_ok=True)
        port = free_port(slurm_ports(), int(a.job_id) * 7)
        client = free_port(slurm_ports() | {port}, port - HEAD_PORTS.start + 1)
        t0 = time.time()
        log(f"head {a.node}: ray start --head at {a.ip}:{port} (temp dir {a.temp_dir})")
        try:
            _ray_start(
                ["--head", f"--port={port}", f"--ray-client-server-port={client}", "--include-dashboard=false"],
                a,
                self.resources,
                self.markers / f"ray_start.{a.node}.log",
            )
        except RuntimeError as e:
            self.stop("failed", str(e).splitlines()[0])
            raise
        self.address = f"{a.ip}:{port}"
        threading.Thread(target=self._heartbeat, daemon=True).start()
        _write_marker(self.markers / HEAD_ADDR, {"address": self.address, "node": a.node, "time": time.time()})
        log(f"head {a.node}: up in {time.time() - t0:.1f} s; {len(a.nodes) - 1} worker node(s) to join")
        return self.address

    def _heartbeat(self) -> None:
        beat = 0
        while not self._beating.wait(HEARTBEAT_S if beat else 0):
            beat += 1
            with contextlib.suppress(OSError):
                _write_marker(self.markers / HEAD_ALIVE, {"beat": beat})

    def wait_for_nodes(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        import ray

        want, t0 = len(self.attempt.nodes), time.time()
        while (alive := len([n for n in ray.nodes() if n.get("Alive")])) < want:
            if time.time() - t0 > timeout_s:
                raise RuntimeError(
                    f"only {alive} of {want} nodes joined the Ray head at {self.address} within {timeout_s:.0f} s; "
                    f"see the other tasks' openrlhf.task<N>.log"
                )
            time.sleep(1)
        log(f"all {want} nodes joined in {time.time() - t0:.1f} s")

    def stop(self, status: str, error: str = "") -> None:
        """head.rc first (a worker reads it and ends), then this node's Ray."""
        self._beating.set()
        self.markers.mkdir(parents=True, exist_ok=True)
        _write_marker(self.markers / HEAD_RC, {"status": status, "error": error[-2000:], "time": time.time()})
        t0 = time.time()
        found, killed = stop_node(self.attempt.temp_dir, self.address)
        log(f"head: {status}; stopped this node's {found} Ray processes in {time.time() - t0:.1f} s ({killed} killed)")


# ----------------------------------------------------------------------------------------------- worker
def run_worker(run_dir: Path, resources: list[str], join_timeout_s: float = JOIN_TIMEOUT_S) -> int:
    """A task > 0: join the head's Ray (this attempt's head.addr), lend the node until head.rc says the head ended,
    stop this node; the exit code says how the head ended (module docstring)."""
    a = Attempt()
    markers = marker_dir(run_dir, a)
    stop_stale(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # SLURM ends the step: stop the node
    t0 = time.time()
    while True:
        rc = read_marker(markers / HEAD_RC)
        if rc is not None:  # the head ended before this node joined
            log(f"worker {a.node}: the head ended ({rc.get('status')}) before this node joined")
            return 0 if rc.get("status") in ("completed", "requeue") else EXIT_HEAD_FAILED
        addr = read_marker(markers / HEAD_ADDR)
        if addr and gcs_up(addr["address"]):
            break
        if time.time() - t0 > join_timeout_s:
            log(f"worker {a.node}: no Ray head in {markers} within {join_timeout_s:.0f} s")
            return EXIT_HEAD_LOST
        time.sleep(0.5)
    address = addr["address"]
    try:
        log(f"worker {a.node}: ray start --address={address} at {a.ip}")
        try:
            _ray_start([f"--address={address}"], a, resources, markers / f"ray_start.{a.node}.log")
        except RuntimeError as e:
            log(str(e))
            return EXIT_HEAD_LOST if not gcs_up(address) else EXIT_RAYLET_LOST
        log(f"worker {a.node}: joined in {time.time() - t0:.1f} s")
        return _lend_node(a, markers, address)
    finally:
        t1 = time.time()
        found, killed = stop_node(a.temp_dir)
        log(f"worker {a.node}: stopped this node's {found} Ray processes in {time.time() - t1:.1f} s ({killed} killed)")


def _raylet(temp_dir: Path):
    import psutil

    for p in node_processes(temp_dir):
        with contextlib.suppress(psutil.Error):
            if p.name() == "raylet":
                return p
    return None


def _lend_node(a: Attempt, markers: Path, address: str) -> int:
    raylet, misses = _raylet(a.temp_dir), 0
    beat, beat_seen = None, time.monotonic()
    while True:
        rc = read_marker(markers / HEAD_RC)
        if rc is not None:
            status = rc.get("status")
            log(f"worker {a.node}: the head ended: {status}")
            return 0 if status in ("completed", "requeue") else EXIT_HEAD_FAILED
        now = (read_marker(markers / HEAD_ALIVE) or {}).get("beat")
        if now != beat:
            beat, beat_seen = now, time.monotonic()
        elif time.monotonic() - beat_seen > HEAD_SILENT_S and read_marker(markers / HEAD_RC) is None:
            log(f"worker {a.node}: the head's launcher went silent ({HEAD_ALIVE} unchanged for {HEAD_SILENT_S:.0f} s)")
            return EXIT_HEAD_LOST
        if gcs_up(address):
            misses = 0
            if raylet is not None and not raylet.is_running():
                if read_marker(markers / HEAD_RC) is None:
                    log(f"worker {a.node}: this node's raylet died while the head is alive")
                    return EXIT_RAYLET_LOST
                continue
        else:
            misses += 1
            if misses >= DEAD_AFTER and read_marker(markers / HEAD_RC) is None:
                log(f"worker {a.node}: the head's Ray at {address} stopped answering without a head.rc")
                return EXIT_HEAD_LOST
        time.sleep(POLL_S)
