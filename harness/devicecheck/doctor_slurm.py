"""``harness doctor --slurm``: the doctor on one node of each partition, as one-node SLURM jobs (submitit), the
reports collected here. Each job asks for every GPU its partition's nodes advertise (``sinfo`` GRES), so the GPU
checks see what a cell would; the jobs' folder (``.harness-doctor/<time>``) must be on storage the nodes share."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from harness.devicecheck.doctor import FAIL, node_report


def partitions() -> list[str]:
    """Every partition ``sinfo`` lists (its default marked ``*`` there, not here), in its order."""
    out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, check=True).stdout
    return list(dict.fromkeys(line.strip() for line in out.splitlines() if line.strip()))


def gpus_per_node(partition: str) -> int:
    """The GPUs one node of ``partition`` advertises (``gpu:8``, ``gpu:h100:8(S:0-1)`` -> 8; none -> 0)."""
    out = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%G"], capture_output=True, text=True, check=True)
    counts = [int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(\s]+)?:(\d+)", out.stdout)]
    return max(counts, default=0)


def run_on_partitions(options: dict, names: list[str] | None, timeout_min: int = 20, log=print) -> dict:
    """Submit the doctor to each partition, wait, and return ``{partition: report}`` (a job that did not report:
    ``{"error": ...}``)."""
    import submitit

    names = names or partitions()
    unknown = sorted(set(names) - set(partitions()))
    if unknown:
        from harness.registry import did_you_mean

        raise ValueError("--partitions: " + did_you_mean(unknown[0], partitions(), "partition"))
    folder = Path(".harness-doctor") / time.strftime("%Y%m%d-%H%M%S")
    jobs = {}
    for p in names:
        ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="slurm")
        gpus = gpus_per_node(p)
        ex.update_parameters(
            name=f"harness-doctor-{p}",
            slurm_partition=p,
            nodes=1,
            tasks_per_node=1,
            timeout_min=timeout_min,
            **({"gpus_per_node": gpus} if gpus else {}),
        )
        jobs[p] = ex.submit(node_report, {**options, "partition": p})
        log(f"partition {p}: job {jobs[p].job_id} ({gpus} GPUs)")
    out = {}
    for p, job in jobs.items():
        try:
            out[p] = job.result()
        except Exception as e:  # noqa: BLE001 - a job that never reported is a failed partition, named
            out[p] = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e) else ''}"}
    return out


def failed(reports: dict) -> bool:
    return any("error" in r or r["summary"][FAIL] for r in reports.values())
