"""The cluster rehearsal's Ray check: a sweep job target that forms one Ray cluster over a multi-node SLURM job through
the OpenRLHF launcher's own head/worker protocol (``raycluster.py``) and places one actor on every node, with a
tiny driver instead of OpenRLHF: seconds where an OpenRLHF cell takes minutes (tests/multinode, docs/gpu.md "The
cluster rehearsal"). Target ``harness.backends.openrlhf.rehearsal.raypair:ray_pair``; a cell's config holds
``behaviour`` (``validate``):

    ray:ok            one actor per node in a STRICT_SPREAD placement group; result.json records where each ran
    ray:head_raises   the same, then the head's driver raises: the head's error is the cell's, workers exit 3
    ray:head_dies     the head task SIGKILLs its own Ray and itself (no head.rc): workers notice and exit 2

Task 0 is the head; every other task lends its node and raises when the head failed, as an OpenRLHF worker does.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import yaml

from harness.io import atomic_write_json

RESOURCES = ["--num-cpus=1", "--num-gpus=0", "--object-store-memory=100000000"]


def validate(raw: dict) -> dict:
    allowed = ("ray:ok", "ray:head_raises", "ray:head_dies")
    unknown = [k for k in raw if k not in ("behaviour", "seed")]
    if unknown or raw.get("behaviour") not in allowed:
        raise ValueError(f"ray target config {raw}: allowed keys behaviour, seed; behaviours {', '.join(allowed)}")
    return dict(raw)


def ray_pair(cell_dir: str) -> dict:
    from harness.backends.openrlhf import raycluster

    d = Path(cell_dir)
    behaviour = yaml.safe_load((d / "config.yaml").read_text())["behaviour"]
    if int(os.environ.get("SLURM_PROCID", "0")) != 0:
        rc = raycluster.run_worker(d, RESOURCES)
        (d / f"worker.{os.environ['SLURM_PROCID']}.rc").write_text(str(rc))
        if rc:
            raise RuntimeError(f"worker task: {raycluster.WORKER_EXITS[rc]} (exit {rc})")
        return {"role": "worker"}
    start = time.time()
    with raycluster.Head(d, RESOURCES) as head:
        placed = place_one_actor_per_node(head)
        if behaviour == "ray:head_raises":
            raise RuntimeError("the head's driver failed on purpose")
        if behaviour == "ray:head_dies":  # no head.rc: the worker must notice that the head's Ray is gone
            for p in raycluster.node_processes(head.attempt.temp_dir):
                p.kill()
            os.kill(os.getpid(), signal.SIGKILL)
    run_id, wall = d.name.rsplit("__", 1)[-1], time.time() - start
    result = {"status": "completed", "run_id": run_id, "placed": placed, "wall_time_s": wall}
    atomic_write_json(d / "result.json", result)
    return {"role": "head", "placed": placed}


def place_one_actor_per_node(head) -> list[dict]:
    """A STRICT_SPREAD placement group with one bundle per node of the job, one actor per bundle: where each ran."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=head.address, log_to_driver=False)
    head.wait_for_nodes()
    n = len(head.attempt.nodes)
    pg = placement_group([{"CPU": 1}] * n, strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)

    @ray.remote(num_cpus=1)
    class Where:
        def where(self) -> dict:
            return {
                "ip": ray.util.get_node_ip_address(),
                "node": os.environ.get("SLURMD_NODENAME"),
                "task": os.environ.get("SLURM_PROCID"),
                "pid": os.getpid(),
            }

    actors = [
        Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)).remote()
        for i in range(n)
    ]
    return ray.get([a.where.remote() for a in actors], timeout=120)
