"""Fixtures shared by every test folder. The repository root is importable (``tests.helpers``), here and in every
process a test starts (PYTHONPATH): a sweep's job target ``tests.helpers.sweep_targets:behave`` runs in local and
SLURM jobs. (In the OpenRLHF venv a ``tests`` package of OpenRLHF's wheel shadows ``tests.helpers``: suites run
there import nothing from it.)"""

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

TINY = {
    "backend": "pocket",
    "seed": 0,
    "method": {"name": "grpo"},
    "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
    "task": {"name": "countdown", "test_size": 16},
    "train": {
        "steps": 3,
        "prompts_per_step": 4,
        "samples_per_prompt": 4,
        "updates_per_rollout": 2,
        "micro_batch_size": 4,
        "max_new_tokens": 6,
        "checkpoint_every": 1,
    },
    "eval": {"every": 2, "n_samples": 2, "max_problems": 8},
    "logging": {"progress": False},
}


@pytest.fixture
def tiny():
    """A run config small enough for a test: 3 steps of 16 responses on the 0.3M model, no warm start."""
    return copy.deepcopy(TINY)


# ------------------------------------------------------------------------------------------------- SLURM clusters
SLURM_CLUSTER = Path(ROOT) / "scripts" / "slurm" / "cluster.sh"


def _slurm_answers(nodes: int) -> bool:
    """SLURM_CONF names a cluster whose ``nodes`` (at least) answer idle/mixed/allocated/completing."""
    if not os.environ.get("SLURM_CONF") or not shutil.which("sinfo"):
        return False
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True)
    ready = [s for s in out.stdout.split() if s.rstrip("*~#") in ("idle", "mix", "alloc", "comp")]
    return out.returncode == 0 and len(ready) >= nodes


def _slurm_cluster(nodes: int, how: str):
    """The real SLURM cluster a CI script started (SLURM_CONF set, ``nodes`` answering); otherwise one started with
    scripts/slurm/cluster.sh for this session (root + Debian packages needed) and stopped afterwards. Never skips: a
    slurm run without a cluster is a failure that says how to get one."""
    if _slurm_answers(nodes):
        yield os.environ["SLURM_CONF"]
        return
    if os.geteuid() != 0 or not shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        pytest.fail(f"no SLURM cluster of {nodes} node(s): run the suite through {how}")
    d = tempfile.mkdtemp(prefix="harness-slurm-")
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    try:
        subprocess.run([str(SLURM_CLUSTER), "up", d, "--nodes", str(nodes)], check=True)
        os.environ["SLURM_CONF"] = f"{d}/slurm.conf"
        os.environ["PATH"] = f"{d}/bin:/usr/sbin:/sbin:{os.environ['PATH']}"
        yield os.environ["SLURM_CONF"]
    finally:
        subprocess.run([str(SLURM_CLUSTER), "down", d])
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node SLURM cluster with accounting (`pytest -m slurm tests/slurm`)."""
    yield from _slurm_cluster(
        1,
        "scripts/ci_slurm.sh (installs slurm-wlm, munge, slurmdbd, mariadb-server as root, starts the cluster, runs "
        "`pytest -m slurm`, stops it)",
    )


@pytest.fixture(scope="session")
def slurm_multinode_cluster():
    """A real two-node SLURM cluster on this machine (nodes at 127.0.0.2, 127.0.0.3; tests/multinode)."""
    yield from _slurm_cluster(2, "scripts/ci_multinode.sh (starts a two-node cluster, runs tests/multinode, stops it)")
