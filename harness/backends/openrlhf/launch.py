"""Start OpenRLHF with the harness hook: ``python -m harness.backends.openrlhf.launch RUN_DIR -- <flags>``.

Starts (or joins, with ``RAY_ADDRESS``) Ray with ``worker_process_setup_hook`` = our hook and the plugin config in
every worker's environment, then runs OpenRLHF's own entry point (``openrlhf.cli.train_ppo_ray`` as ``__main__``, so
all its argument validation applies). ``train()`` skips its ``ray.init`` when Ray is up. On a multi-node SLURM
allocation (one task per node) task 0 starts the Ray head and runs OpenRLHF, the other tasks lend their nodes until
the head's launcher ends (``raycluster.py``: markers on the run directory, no ``--block``, no ``ray stop``). When the
plug-in stopped after the checkpoint the job asked for (harness/run/preempt.py) the launcher exits with
``CHECKPOINTED_EXIT`` instead of failing.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

from harness.backends.openrlhf import jit_locks, raycluster
from harness.backends.openrlhf.flags import EXTRA, HOOK, PLUGIN_ENV
from harness.run import preempt

OPENRLHF_VERSION = "0.11.2"
RUNNER_ENV = "HARNESS_RUNNER_WRITES_RESULT"  # set by runner.train: the launch then writes no result.json
CHECKPOINTED_EXIT = 75  # stopped after the checkpoint its job asked for (EX_TEMPFAIL: try again, resume)

REPO_ROOT = str(Path(__file__).resolve().parents[3])


class OpenRLHFMissingError(ImportError):
    """OpenRLHF (or one of its GPU dependencies) is not installed."""


def require_openrlhf() -> None:
    """Raise OpenRLHFMissingError naming the extra when OpenRLHF cannot be imported here."""
    import importlib.util

    missing = [m for m in ("openrlhf", "ray", "deepspeed") if importlib.util.find_spec(m) is None]
    if missing:
        raise OpenRLHFMissingError(f"backend openrlhf needs {', '.join(missing)}, which is not installed: {EXTRA}")
    import importlib.metadata

    version = importlib.metadata.version("openrlhf")
    if version != OPENRLHF_VERSION:
        raise OpenRLHFMissingError(
            f"backend openrlhf is written against openrlhf=={OPENRLHF_VERSION} (its private loss/advantage seams "
            f"change between releases), found {version}: {EXTRA}"
        )


def runtime_env(extra_env: dict | None = None) -> dict:
    """Ray runtime_env: our hook plus the variables every worker needs (what upstream's train() would set)."""
    env = {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
        "PYTHONPATH": os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p),
    }
    from harness.run.offline import PASSED_ON  # a staged job's workers read only the stage too

    for key, value in os.environ.items():
        if key.startswith("HARNESS_") or key in PASSED_ON:
            env[key] = value
    if env.get("HARNESS_OPENRLHF_REHEARSAL") == "1":  # CPU workers: one thread each, DeepSpeed's CPU accelerator,
        env.setdefault("OMP_NUM_THREADS", "1")  # its JIT-built ops in this venv (scripts/setup_openrlhf.sh builds
        env.setdefault("DS_ACCELERATOR", "cpu")  # them there; a cache shared with other jobs was rebuilt under us)
        env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    env.update(extra_env or {})
    return {"env_vars": env, "worker_process_setup_hook": HOOK}


def write_eval_dataset() -> None:
    """eval.suites -> the in-loop eval JSONL named by --eval.dataset (at every launch: the staged copy of a staged
    sweep, else rendered)."""
    spec = json.loads(os.environ[PLUGIN_ENV]).get("eval") or {}
    if spec.get("suites"):
        from harness.backends.openrlhf import evalset
        from harness.run.offline import stage_dir_of_env

        path, source = evalset.write(spec, stage_dir_of_env())
        print(f"harness: in-loop eval dataset {path} ({', '.join(spec['suites'])}; {source})", flush=True)


def rehearsal_ray_kwargs() -> dict:
    """A CPU rehearsal's local Ray cluster: logical GPUs for upstream's placement groups (cpu_rehearsal.py)."""
    cfg = json.loads(os.environ.get(PLUGIN_ENV, "{}")).get("rehearsal")
    if not cfg or os.environ.get("RAY_ADDRESS"):
        return {}
    from harness.backends.openrlhf.rehearsal.cpu import ray_init_kwargs

    return ray_init_kwargs(cfg["logical_gpus"])


def node_resources(nodes: int) -> list[str]:
    """``ray start`` resource flags of one node of a multi-node job: none on a GPU cluster (Ray detects them); a
    rehearsal's share of its logical GPUs (with CPUs and object store as its local cluster has them)."""
    cfg = json.loads(os.environ.get(PLUGIN_ENV, "{}")).get("rehearsal")
    if not cfg:
        return []
    from harness.backends.openrlhf.rehearsal.cpu import ray_init_kwargs

    kw = ray_init_kwargs(-(-int(cfg["logical_gpus"]) // nodes))
    return [
        f"--num-gpus={kw['num_gpus']}",
        f"--num-cpus={kw['num_cpus']}",
        f"--object-store-memory={kw['object_store_memory']}",
    ]


def expand(argv: list[str]) -> list[str]:
    out = []
    for a in argv:
        if a == "${WANDB_API_KEY}":
            if not os.environ.get("WANDB_API_KEY"):
                raise SystemExit("logging.wandb is on but WANDB_API_KEY is not set")
            a = os.environ["WANDB_API_KEY"]
        out.append(a)
    return out


def slurm_nodes() -> list[str]:
    """Hostnames of this SLURM job's nodes (empty outside a multi-node SLURM step)."""
    if int(os.environ.get("SLURM_NNODES", "1")) <= 1 or "SLURM_JOB_NODELIST" not in os.environ:
        return []
    out = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python -m harness.backends.openrlhf.launch RUN_DIR -- <openrlhf flags>", file=sys.stderr)
        return 2
    if PLUGIN_ENV not in os.environ:
        print(f"{PLUGIN_ENV} is not set; print the full command with `harness train CONFIG --dry-run`", file=sys.stderr)
        return 2
    require_openrlhf()
    import ray

    from harness.backends.openrlhf import hook

    run_dir = Path(argv[0])
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"harness: launching OpenRLHF for {run_dir}", flush=True)  # one line per launch (a resume adds one)
    nodes = [] if os.environ.get("RAY_ADDRESS") else slurm_nodes()
    if nodes and int(os.environ.get("SLURM_PROCID", "0") or 0) != 0:  # lends its node to the head's Ray
        return raycluster.run_worker(run_dir, node_resources(len(nodes)))
    write_eval_dataset()
    jit_locks.clear_stale(jit_locks.extensions_dir({**os.environ, **runtime_env()["env_vars"]}))  # killed builds
    hook.install()
    t0, status, code = time.time(), "failed", 1
    with raycluster.Head(run_dir, node_resources(len(nodes))) if nodes else contextlib.nullcontext() as head:
        try:
            if head is not None:
                ray.init(address=head.address, runtime_env=runtime_env())
                head.wait_for_nodes()
            elif not ray.is_initialized():
                # a new local cluster unless RAY_ADDRESS names one (never a cluster some `ray start` left behind)
                address = os.environ.get("RAY_ADDRESS") or "local"
                ray.init(address=address, runtime_env=runtime_env(), **rehearsal_ray_kwargs())
            sys.argv = ["train_ppo_ray", *expand(argv[2:])]
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
            status, code = "completed", 0
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException:  # upstream's argparse exits with SystemExit; a Ray task error; our stop on request
            step = preempt.saved_step(run_dir)
            if step is None:
                raise
            status, code = "requeue", CHECKPOINTED_EXIT  # head.rc "requeue": the workers end without an error
            if head is not None:
                head.status = status
            print(f"harness: stopped after the checkpoint of step {step} the job asked for; it resumes there")
        finally:
            if not os.environ.get(RUNNER_ENV) and status != "requeue":  # by hand; under the runner it writes it
                write_result(run_dir, status, time.time() - t0)
            if ray.is_initialized():
                ray.shutdown()
    return code


def write_result(run_dir: Path, status: str, wall_s: float) -> None:
    """result.json of a launch run by hand, from the plugin config and metrics.jsonl (last, atomically)."""
    from harness.backends.openrlhf import bridge

    cfg = json.loads(os.environ[PLUGIN_ENV])
    payload = bridge.build_result(cfg.get("config", {}), run_dir, status, wall_s, cfg.get("run_id"), cfg["method"])
    bridge.write_result(run_dir, payload)


if __name__ == "__main__":
    sys.exit(main())
