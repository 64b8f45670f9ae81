"""The real single-node SLURM cluster for `pytest -m slurm`.

Uses the cluster scripts/ci_slurm.sh started (SLURM_CONF set and `sinfo` answering); otherwise starts one
with scripts/slurm/cluster.sh for this session (root + Debian packages needed) and stops it afterwards.
Never skips: a slurm run without a cluster is a failure that says how to get one.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "slurm" / "cluster.sh"


def _answers() -> bool:
    if not os.environ.get("SLURM_CONF") or not shutil.which("sinfo"):
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    state = out.stdout.strip().split("\n")[0].rstrip("*~#")
    return out.returncode == 0 and state in ("idle", "mix", "alloc", "comp")


@pytest.fixture(scope="session")
def slurm_cluster():
    if _answers():
        yield os.environ["SLURM_CONF"]
        return
    if os.geteuid() != 0 or not shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        pytest.fail(
            "no SLURM cluster: run the suite through scripts/ci_slurm.sh (installs slurm-wlm, munge, "
            "slurmdbd, mariadb-server as root, starts the cluster, runs `pytest -m slurm`, stops it)"
        )
    d = tempfile.mkdtemp(prefix="harness-slurm-")
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH")}
    try:
        subprocess.run([str(CLUSTER), "up", d], check=True)
        os.environ["SLURM_CONF"] = f"{d}/slurm.conf"
        os.environ["PATH"] = f"{d}/bin:/usr/sbin:/sbin:{os.environ['PATH']}"
        yield os.environ["SLURM_CONF"]
    finally:
        subprocess.run([str(CLUSTER), "down", d])
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(d, ignore_errors=True)
