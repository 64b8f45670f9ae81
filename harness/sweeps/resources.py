"""Resource keys of a sweep spec and their translation into submitit executor parameters.

Keys (``resources.default`` and each ``resources.groups[i]``; units in the name):
  partition, account, qos, constraint      sbatch --partition/--account/--qos/--constraint
  nodes, tasks_per_node, gpus_per_node, cpus_per_task, mem_gb, timeout_min
  array_parallelism                        at most this many array tasks at once (local executor: cells at once)
  signal_delay_s                           USR2 this long before the time limit (submitit checkpoints, requeues)
  max_num_timeout                          requeues after a time-out before the cell counts as failed
  additional_parameters                    any other sbatch option, e.g. {mail-type: END, exclusive: true}
  setup                                    shell lines run in the sbatch script before the job (module load ...)
  disk_gb                                  disk a cell may use (GB, 10^9 bytes): its backend's disk plan must fit,
                                           checked before anything is queued (harness/sweeps/disk.py); no sbatch option
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from harness.kernel.fields import as_recorded, check_value, opt, spec
from harness.registry import did_you_mean


def _lines(v) -> str | None:
    return None if isinstance(v, list) and all(isinstance(x, str) for x in v) else "expected a list of shell lines"


RESOURCE_KEYS = {  # declared like every config field (harness.kernel.fields.opt); None: unset (executor default)
    "partition": opt(None, "sbatch --partition", kind=str),
    "account": opt(None, "sbatch --account", kind=str),
    "qos": opt(None, "sbatch --qos", kind=str),
    "constraint": opt(None, "sbatch --constraint", kind=str),
    "nodes": opt(1, kind=int, low=1),
    "tasks_per_node": opt(1, kind=int, low=1),
    "gpus_per_node": opt(0, kind=int, low=0),
    "cpus_per_task": opt(1, kind=int, low=1),
    "mem_gb": opt(None, kind=float, low=0),
    "timeout_min": opt(60, kind=int, low=1),
    "array_parallelism": opt(None, "at most this many array tasks at once", kind=int, low=1),
    "signal_delay_s": opt(None, "USR2 this long before the time limit", kind=int, low=0),
    "max_num_timeout": opt(3, "requeues after a time-out", kind=int, low=0),
    "additional_parameters": opt({}, "any other sbatch option, e.g. {mail-type: END}", kind=dict),
    "setup": opt([], "shell lines run before the job", kind=object, check=_lines),
    "disk_gb": opt(None, "disk a cell may use, GB: its disk plan must fit", kind=float, low=0, low_open=True),
}
DEFAULTS: dict[str, Any] = {  # what a cell gets for a key no layer sets
    k: RESOURCE_KEYS[k].default
    for k in ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "timeout_min", "max_num_timeout")
}
EXECUTORS = ("local", "slurm", "debug")


def check_resources(data: Any, where: str, extra_keys: tuple[str, ...] = ()) -> dict:
    """Validate one resource mapping; errors name ``where.<key>`` and the allowed keys/values."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping of resource keys ({', '.join(RESOURCE_KEYS)}), got {data!r}")
    out = {}
    for key, value in data.items():
        if key in extra_keys:
            continue
        if key not in RESOURCE_KEYS:
            raise ValueError(f"{where}.{key}: {did_you_mean(str(key), list(RESOURCE_KEYS), 'resource key')}")
        typed = check_value(value, spec(RESOURCE_KEYS[key]), f"{where}.{key}", ValueError)
        out[key] = list(typed) if isinstance(typed, list) else as_recorded(value, typed)  # mem_gb: 64 stays 64
    return out


def merged(default: Mapping, *overrides: Mapping) -> dict:
    """Built-in defaults, then the spec's default, then each matching group (later wins)."""
    out = dict(DEFAULTS)
    for layer in (default, *overrides):
        out.update(layer)
    return out


def check_executor(executor: str) -> str:
    if executor not in EXECUTORS:
        raise ValueError(f"--executor: {did_you_mean(executor, EXECUTORS, 'executor')}")
    return executor


def executor_kwargs(resources: Mapping, executor: str) -> dict:
    """Keyword arguments for ``submitit.AutoExecutor(folder, cluster=executor, **kwargs)``."""
    if executor == "debug":
        return {}
    return {f"{executor}_max_num_timeout": resources.get("max_num_timeout", DEFAULTS["max_num_timeout"])}


def executor_parameters(resources: Mapping, executor: str, name: str) -> dict:
    """Parameters for ``AutoExecutor.update_parameters``; ``slurm_*`` keys only for the slurm executor."""
    r = dict(resources)
    params: dict[str, Any] = {"name": name}
    for key in ("timeout_min", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "mem_gb"):
        if r.get(key) is not None:
            params[key] = r[key]
    if executor == "slurm":
        for key in ("partition", "account", "qos", "constraint", "array_parallelism", "signal_delay_s"):
            if r.get(key) is not None:
                params[f"slurm_{key}"] = r[key]
        if r.get("additional_parameters"):
            params["slurm_additional_parameters"] = dict(r["additional_parameters"])
        if r.get("setup"):
            params["slurm_setup"] = list(r["setup"])
    elif executor == "local":
        if r.get("setup"):
            params["local_setup"] = list(r["setup"])
        params.pop("mem_gb", None)
        params.pop("cpus_per_task", None)
    else:  # debug runs in this process: only the generic keys matter (and are ignored)
        params = {"name": name, "timeout_min": r.get("timeout_min", DEFAULTS["timeout_min"])}
    return params


def check_fits_executor(resources: Mapping, executor: str, where: str) -> None:
    """The local executor runs on this machine: refuse multi-node cells with a pointer to slurm."""
    if executor == "local" and resources.get("nodes", 1) > 1:
        raise ValueError(
            f"{where}: needs {resources['nodes']} nodes, but the local executor runs on one machine; "
            f"use --executor slurm (or --dry-run to only see the plan)"
        )


def local_parallelism(resources: Mapping) -> int:
    """Cells run at once by the local executor: array_parallelism, else CPUs // cpus_per_task."""
    if resources.get("array_parallelism"):
        return int(resources["array_parallelism"])
    try:
        cpus = len(os.sched_getaffinity(0))  # the CPUs this process may use (containers, taskset)
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, cpus // int(resources.get("cpus_per_task", 1)))


def with_layout(config: Mapping, resources: Mapping, explicit: set[str], where: str) -> dict:
    """A backend that places its own workers (its ``layout``, e.g. OpenRLHF's Ray over nodes x GPUs) gets the job
    it needs: the layout's keys are derived from the run config; one a spec states (``explicit``) must agree."""
    from harness.backends import DEFAULT_BACKEND, get_backend
    from harness.run.config import load_config

    backend = get_backend(config.get("backend", DEFAULT_BACKEND))
    if "places_workers" not in backend.capabilities:
        return dict(resources)
    out = dict(resources)
    for key, want in backend.layout(load_config(config, check_method=False)).items():
        if key in explicit and resources.get(key) != want:
            raise ValueError(
                f"{where}: the {backend.name} backend's config places its workers on {key}={want}, but the "
                f"cell's resources give {key}={resources.get(key)}; drop it from the resources (it is derived "
                f"from the config) or make them equal"
            )
        out[key] = want
    return out


def group_by_resources(cells: list) -> list[tuple[dict, list]]:
    """Cells with identical resources share one job array; groups keep the expansion order."""
    groups: dict[str, tuple[dict, list]] = {}
    for c in cells:
        key = json.dumps(c.resources, sort_keys=True, default=str)
        groups.setdefault(key, (c.resources, []))[1].append(c)
    return list(groups.values())
