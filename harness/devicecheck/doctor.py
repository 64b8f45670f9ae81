"""``harness doctor``: can this node run a cell? One line per check (ok / FAIL / skipped with the reason), a JSON
report, exit 1 on a failure.

What a GPU cell of the OpenRLHF path needs, checked where it runs (``--slurm``: on one node of each partition):
GPUs and their memory (against the spec's ``gpus_per_node`` and ``openrlhf.gpu_memory_gb``), CUDA, the CUDA
toolkit DeepSpeed's JIT ops compile with (its ``nvcc`` against torch's CUDA, by DeepSpeed 0.19.6's own rule),
flash-attn and vLLM importable, NCCL (a one-rank all-reduce), the OpenRLHF stack, ``ray`` on PATH from this
environment (multi-node jobs start Ray with the ``ray`` command), free disk where the runs go, and the spec's
staged inputs (harness/sweeps/staging.py). ``--cpu`` runs every check that needs no GPU and reports the GPU checks
as skipped, never as passed. Without ``--spec`` the node is checked for the whole GPU path.

Unlike ``scripts/device_check.sh`` (which measures the harness's own code on a borrowed GPU), nothing here
trains or times anything: it is the preflight a cluster user runs before submitting.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"
SCHEMA_VERSION = 1
GPU_CHECKS = ("gpus", "cuda", "cuda_toolkit", "flash_attn", "vllm", "nccl")
CHILD_TIMEOUT_S = 180
FLASH_ATTN_VERSION = "2.8.3"  # OpenRLHF 0.11.2's pin
VLLM_VERSION = "0.29.0"  # the harness's gpu extra
# DeepSpeed 0.19.6, op_builder/builder.py (assert_no_cuda_mismatch): nvcc's major.minor must equal torch's CUDA
# major.minor, except between these minors of one major (no CUDA 13 entry: 13.x must match exactly)
CUDA_MINOR_MISMATCH_OK = {
    10: ("10.0", "10.1", "10.2"),
    11: ("11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8"),
    12: ("12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9"),
}


@dataclass
class Check:
    name: str
    status: str  # ok | FAIL | skipped
    detail: str
    data: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.status:8s}{self.name:14s}{self.detail}"


@dataclass
class Needs:
    """What the node must offer, from the spec's cells (no spec: the whole GPU path, counts unknown)."""

    spec: str | None = None
    gpu: bool = True  # some cell asks for GPUs
    stack: bool = True  # some cell's backend places its own workers (the OpenRLHF stack: Ray, DeepSpeed, vLLM)
    multi_node: bool = True  # some cell spans nodes: the job starts Ray with the `ray` command
    gpus_per_node: int | None = None
    gpu_memory_gb: float | None = None  # the memory per GPU the memory plans assume
    runs_dir: str | None = None
    stage_problem: str | None = None  # why the spec's inputs are not staged (None: they are, or none are needed)
    staged: str = ""  # why they are fine, in words


def needs_of(spec_path: str | None, online: bool = False) -> Needs:
    """The :class:`Needs` of a sweep spec (expanded and validated first), or of the GPU path without one."""
    if spec_path is None:
        return Needs()
    from harness.backends import get_backend
    from harness.sweeps.expand import expand
    from harness.sweeps.spec import load_spec
    from harness.sweeps.staging import stage_dir_of, submission_problem

    spec = load_spec(spec_path)
    cells = expand(spec)
    gpus = [int(c.resources.get("gpus_per_node") or 0) for c in cells]
    memory = [float(c.config["openrlhf"]["gpu_memory_gb"]) for c in cells if c.config.get("backend") == "openrlhf"]
    stage = stage_dir_of(spec)
    return Needs(
        spec=str(spec_path),
        gpu=max(gpus) > 0 or any(str(c.config["train"].get("device", "")).startswith("cuda") for c in cells),
        stack=any("places_workers" in get_backend(c.config["backend"]).capabilities for c in cells),
        multi_node=any(int(c.resources.get("nodes") or 1) > 1 for c in cells),
        gpus_per_node=max(gpus),
        gpu_memory_gb=max(memory) if memory else None,
        runs_dir=str(Path("runs") / spec.name),
        stage_problem=submission_problem(spec, cells, "slurm", online),
        staged=f"every input its jobs read is staged in {stage}"
        if stage
        else ("--online: its jobs may read the hub" if online else "its cells read nothing from the hub"),
    )


# ---------------------------------------------------------------------------------------------- GPU checks
def check_gpus(needs: Needs) -> Check:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = [torch.cuda.get_device_properties(i) for i in range(n)]
    names = [p.name for p in gpus]
    mem = [round(p.total_memory / 2**30, 1) for p in gpus]
    data = {"count": n, "names": names, "memory_gib": mem}
    if n == 0:
        return Check("gpus", FAIL, "no CUDA GPU visible (torch.cuda.device_count() = 0)", data)
    shown = f"{n} x {names[0]}, {min(mem):.1f} GiB each" if len(set(names)) == 1 else ", ".join(names)
    if needs.gpus_per_node and n < needs.gpus_per_node:
        return Check("gpus", FAIL, f"{shown}; the spec's cells need {needs.gpus_per_node} per node", data)
    if needs.gpu_memory_gb and min(mem) < needs.gpu_memory_gb:
        return Check(
            "gpus",
            FAIL,
            f"{shown}; the memory plans assume {needs.gpu_memory_gb:g} GiB per GPU (openrlhf.gpu_memory_gb)",
            data,
        )
    return Check("gpus", OK, shown, data)


def check_cuda(needs: Needs) -> Check:
    import torch

    data = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "available": torch.cuda.is_available()}
    if torch.version.cuda is None:
        return Check("cuda", FAIL, f"torch {torch.__version__} is a CPU build (no CUDA)", data)
    if not torch.cuda.is_available():
        return Check("cuda", FAIL, f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU", data)
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    data["driver"] = driver.splitlines()[0].strip() if driver else None
    return Check("cuda", OK, f"torch {torch.__version__}, CUDA {torch.version.cuda}, driver {data['driver']}", data)


def nvcc_release(nvcc: str) -> str | None:
    """``"13.0"`` from ``nvcc -V`` (the word after ``release``, as DeepSpeed reads it), None when it cannot run."""
    out = _run([nvcc, "-V"])
    m = re.search(r"release (\d+)\.(\d+)", out or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def toolkit_matches(nvcc: str, torch_cuda: str) -> bool:
    """DeepSpeed 0.19.6's rule (``assert_no_cuda_mismatch``): equal major.minor, or both in one major's OK list."""
    torch_mm = ".".join(torch_cuda.split(".")[:2])
    major = int(nvcc.split(".")[0])
    ok = CUDA_MINOR_MISMATCH_OK.get(major, ())
    return nvcc == torch_mm or (nvcc in ok and torch_mm in ok)


def check_cuda_toolkit(needs: Needs) -> Check:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME  # where DeepSpeed's op builder looks (None on a CPU torch)

    on_path = shutil.which("nvcc")
    data = {"cuda_home": CUDA_HOME, "torch_cuda": torch.version.cuda, "nvcc_on_path": on_path}
    if torch.version.cuda is None:
        found = f" (nvcc {nvcc_release(on_path)} is on PATH at {on_path})" if on_path else ""
        return Check("cuda_toolkit", FAIL, f"torch is a CPU build: no CUDA ops to build{found}; see cuda", data)
    nvcc = str(Path(CUDA_HOME) / "bin" / "nvcc") if CUDA_HOME else None
    release = nvcc_release(nvcc) if nvcc else None
    data.update(nvcc=nvcc, nvcc_release=release)
    if release is None:
        return Check(
            "cuda_toolkit",
            FAIL,
            f"no nvcc at CUDA_HOME ({CUDA_HOME or 'unset'}): DeepSpeed builds its fused Adam and other ops with it "
            f"at the first run; install the CUDA {torch.version.cuda} toolkit and set CUDA_HOME",
            data,
        )
    if not toolkit_matches(release, torch.version.cuda):
        return Check(
            "cuda_toolkit",
            FAIL,
            f"nvcc {release} ({nvcc}) does not match torch's CUDA {torch.version.cuda}: DeepSpeed 0.19.6 refuses to "
            f"build its ops (CUDAMismatchException); install the matching toolkit and point CUDA_HOME at it",
            data,
        )
    return Check("cuda_toolkit", OK, f"nvcc {release} at {nvcc} matches torch's CUDA {torch.version.cuda}", data)


def check_import(name: str, module: str, want: str | None) -> Check:
    """``import module`` in a child interpreter (a broken CUDA extension cannot take this one down)."""
    code = f"import {module}, importlib.metadata as m; print(m.version({name!r}))"
    proc = _child(code)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return Check(name.replace("-", "_"), FAIL, f"import {module} fails: {last}", {"error": last})
    version = proc.stdout.strip().splitlines()[-1]
    check = Check(name.replace("-", "_"), OK, f"{name} {version}", {"version": version})
    if want and version.split("+")[0] != want:
        check.status, check.detail = FAIL, f"{name} {version}; the harness is pinned to {want}"
    return check


NCCL_PROBE = r"""
import os, socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
assert dist.is_nccl_available(), "torch.distributed has no NCCL backend"
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
x = torch.ones(4, device="cuda:0"); dist.all_reduce(x); torch.cuda.synchronize()
assert x.tolist() == [1.0] * 4, x
print(".".join(map(str, torch.cuda.nccl.version())))
dist.destroy_process_group()
"""


def check_nccl(needs: Needs) -> Check:
    proc = _child(NCCL_PROBE)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return Check("nccl", FAIL, f"a one-rank NCCL all-reduce on cuda:0 fails: {last}", {"error": last})
    version = proc.stdout.strip().splitlines()[-1]
    return Check("nccl", OK, f"NCCL {version}: a one-rank all-reduce on cuda:0", {"version": version})


# ---------------------------------------------------------------------------------------------- node checks
def check_stack(needs: Needs) -> Check:
    """The OpenRLHF stack, by its launcher's own check (versions from package metadata, nothing imported)."""
    import importlib.metadata as md

    from harness.backends.openrlhf.launch import OpenRLHFMissingError, require_openrlhf

    if not needs.stack:
        return Check("stack", SKIPPED, "no cell of the spec uses a backend that places its own workers")
    try:
        require_openrlhf()
    except OpenRLHFMissingError as e:
        return Check("stack", FAIL, str(e))
    versions = {p: md.version(p) for p in ("openrlhf", "deepspeed", "ray")}
    return Check("stack", OK, ", ".join(f"{p} {v}" for p, v in versions.items()), versions)


def check_ray_cli(needs: Needs) -> Check:
    """``ray`` on PATH, from this Python's environment (a multi-node job starts Ray on every node with it)."""
    import importlib.util

    if not needs.multi_node:
        return Check(
            "ray_cli", SKIPPED, "no cell of the spec spans several nodes (single-node jobs start Ray in Python)"
        )
    if importlib.util.find_spec("ray") is None:
        return Check("ray_cli", SKIPPED, "ray is not installed in this Python (see stack)")
    found, own = shutil.which("ray"), Path(sys.executable).parent / "ray"
    data = {"on_path": found, "this_environment": str(own)}
    if found is None:
        hint = f"put {own.parent} on PATH in the job" if own.exists() else "install ray into this environment"
        return Check(
            "ray_cli", FAIL, f"`ray` is not on PATH; {hint} (e.g. resources.setup: [source .../activate])", data
        )
    shebang = _shebang(found)
    data["shebang"] = shebang
    if shebang and Path(shebang).parent.resolve() != Path(sys.executable).parent.resolve():  # a venv's bin, by path
        return Check(
            "ray_cli",
            FAIL,
            f"`ray` on PATH is {found}, another environment's ({shebang}); put {own.parent} first on PATH in the job",
            data,
        )
    return Check("ray_cli", OK, f"{found}", data)


def check_disk(needs: Needs, path: str | None, need_gb: float | None) -> Check:
    """Free space where the runs go (the nearest existing folder of it) against what they need."""
    from harness.io import _existing_ancestor

    where = Path(path or needs.runs_dir or ".").absolute()
    free = shutil.disk_usage(_existing_ancestor(where)).free / 2**30
    data = {"path": str(where), "free_gib": round(free, 1), "need_gib": need_gb}
    if need_gb is None:
        return Check("disk", OK, f"{free:.1f} GiB free at {where} (no need stated: --need-gb)", data)
    if free < need_gb:
        return Check("disk", FAIL, f"{free:.1f} GiB free at {where}, {need_gb:g} GiB needed", data)
    return Check("disk", OK, f"{free:.1f} GiB free at {where}, {need_gb:g} GiB needed", data)


def check_staged(needs: Needs) -> Check:
    if needs.spec is None:
        return Check("staged", SKIPPED, "no --spec: the staged inputs of which sweep?")
    if needs.stage_problem:
        return Check("staged", FAIL, needs.stage_problem)
    return Check("staged", OK, f"{needs.spec}: {needs.staged}")


# ---------------------------------------------------------------------------------------------- the run
def run_checks(cpu: bool, needs: Needs, path: str | None = None, need_gb: float | None = None, log=None) -> list:
    """Every check, in order; ``log(line)`` as each one finishes."""
    gpu = {
        "gpus": check_gpus,
        "cuda": check_cuda,
        "cuda_toolkit": check_cuda_toolkit,
        "flash_attn": lambda n: check_import("flash-attn", "flash_attn, flash_attn_2_cuda", FLASH_ATTN_VERSION),
        "vllm": lambda n: check_import("vllm", "vllm", VLLM_VERSION),
        "nccl": check_nccl,
    }
    optional = {"flash_attn", "vllm"}  # the OpenRLHF stack's GPU parts
    out = []
    for name, fn in gpu.items():
        if cpu:
            check = Check(name, SKIPPED, "--cpu: GPU checks are not run")
        elif not needs.gpu:
            check = Check(name, SKIPPED, "no cell of the spec asks for a GPU")
        elif name in optional and not needs.stack:
            check = Check(name, SKIPPED, "no cell of the spec uses the OpenRLHF stack")
        else:
            check = _guarded(name, fn, needs)
        out.append(_logged(check, log))
    for name, fn in (
        ("stack", check_stack),
        ("ray_cli", check_ray_cli),
        ("disk", lambda n: check_disk(n, path, need_gb)),
        ("staged", check_staged),
    ):
        out.append(_logged(_guarded(name, fn, needs), log))
    return out


def report(checks: list, cpu: bool, needs: Needs, argv: list[str] | None = None) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "host": socket.gethostname(),
        "mode": "cpu" if cpu else "gpu",
        "spec": needs.spec,
        "argv": argv,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": {s: [c.name for c in checks if c.status == s] for s in (OK, FAIL, SKIPPED)},
        "checks": [asdict(c) for c in checks],
    }


def node_report(options: dict) -> dict:
    """The whole doctor on this node (a SLURM job's function): ``options`` = cpu, spec, path, need_gb, online."""
    needs = needs_of(options.get("spec"), options.get("online", False))
    checks = run_checks(bool(options.get("cpu")), needs, options.get("path"), options.get("need_gb"))
    return report(checks, bool(options.get("cpu")), needs, options.get("argv"))


def _guarded(name: str, fn, needs: Needs) -> Check:
    try:
        return fn(needs)
    except Exception as e:  # noqa: BLE001 - a check that breaks is a failed check, named, not a crash
        return Check(name, FAIL, f"the check itself failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def _logged(check: Check, log) -> Check:
    if log is not None:
        log(check.line())
    return check


def _run(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _child(code: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 1, "", f"timed out after {CHILD_TIMEOUT_S} s")


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline().decode(errors="replace").strip()
    except OSError:
        return None
    return first[2:].split()[0] if first.startswith("#!") and len(first) > 2 else None
