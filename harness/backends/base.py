"""The backend protocol: the one seam between a training backend and the rest of the harness.

Sweeps, evals, results and commands reach a backend only through ``get_backend(name)`` and the methods below;
no module outside ``harness/backends/`` names a backend (tests/foundation/test_import_graph.py checks it).
A backend is a subclass of ``Backend`` registered once, as an instance, with ``@register_backend``:

    @register_backend
    class MyBackend(Backend):
        name = "mine"
        sections = {"mine": MyOptions}          # config sections it types (dataclasses built by harness.kernel.fields)
        def validate(self, config): ...          # called by load_config; raises ConfigError
        def train(self, config, run_dir, log): ...   # -> harness.run.records.RunResult; the runner writes result.json

Everything else has a default that fits a backend training in the process that runs it.

Config sections. ``load_config`` types the core sections, then each section the run's backend declares in
``sections`` (``build_section``); a section that only other backends declare is refused unless it is empty, like
an unknown key (``openrlhf.nodes`` on a pocket run names the openrlhf backend). A top-level section is recorded
in a run's config only on its own backend's runs, except the ones a backend lists in ``recorded_by_every_run``:
those were core sections when run ids were published, and every run records them (``{}`` on other backends' runs)
so that no id changes.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

HEAD, WORKER, IDLE = "head", "worker", "idle"  # worker_role(): what one task of a (multi-node) job does


class Backend:
    """Base class and documentation of the protocol; defaults are those of an in-process, single-node backend."""

    name: ClassVar[str] = ""
    sections: ClassVar[dict[str, type]] = {}  # dotted config path -> options dataclass this backend types
    recorded_by_every_run: ClassVar[tuple[str, ...]] = ()  # top-level sections of ``sections`` (see above)
    default_model: ClassVar[str | None] = None  # model.name of a config that names none (the default backend's)
    default_task: ClassVar[str | None] = None  # task.name of a config that names none (the default backend's)
    run_files: ClassVar[tuple[str, ...]] = ()  # glob patterns of the files it writes into a run directory (its logs)
    packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions a run's provenance records
    # what callers may ask for: "auxiliary_model" (PRIME's PRM), "entropy_after_update", "in_loop_suites"
    # (eval.suites scored during training), "places_workers" (starts its own multi-GPU/multi-node workers),
    # "policy_sampler" (policy_sampler(config, run_dir): a finished run's policy as a sampler, for analyses),
    # "checkpoint_on_request" (train() honours harness.run.preempt's request: it checkpoints at the next step
    # boundary and stops with KeyboardInterrupt, so a sweep job requeues only then; harness/sweeps/preemption.py)
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def build_section(self, path: str, value) -> Any:
        """The typed section ``path`` (a key of ``sections``) from the config's mapping (None: absent); raise
        ``harness.errors.ConfigError``. Default: ``harness.kernel.fields.build`` of the declared dataclass."""
        from harness.kernel.fields import build

        return build(self.sections[path], value, path)

    def canonical(self, data: Mapping) -> Mapping:
        """The raw config mapping (overrides applied, nothing typed yet) in one spelling, where this backend lets a
        setting be written two ways (OpenRLHF: upstream's is_correction_* flags in ``extra_flags`` move into the
        method's ``rollout_correction``), so both are one config and one run id; a new mapping, ``data`` unchanged.
        Default: ``data`` as it is."""
        return data

    def validate(self, config) -> None:
        """Check the run config (its sections typed already) against what this backend can run; raise
        ``harness.errors.ConfigError``."""

    def train(self, config, run_dir: Path, log=print):
        """Train one run into ``run_dir``, resuming from its checkpoints; return a ``harness.run.records.RunResult``."""
        raise NotImplementedError(f"backend {self.name!r} has no train()")

    def check_resume(self, config, run_dir: Path, old_config: dict | None = None) -> None:
        """Refuse (``ValueError``) what this run must not continue from ``run_dir``'s checkpoints (another run's, one
        past ``train.steps``, settings that change the numbers); called before anything there is written.
        ``old_config`` is the directory's config.yaml (None when absent). Default: nothing to check."""

    def launch_command(self, config, run_dir: Path) -> str:
        """The shell command that trains this run (``--dry-run`` prints it; a sweep job runs it)."""
        return harness_train_command(run_dir)

    # population training: several runs that differ only in ``population_member_keys`` in one process
    population_member_keys: ClassVar[tuple[str, ...]] = ()

    def population_apart(self, configs) -> str | None:
        """None when the runs ``configs`` can train as one population on this backend, else the reason."""
        return f"the {self.name} backend has no population training"

    def train_population(self, configs, run_dirs) -> list:
        """Train ``configs`` into ``run_dirs`` as one population; each entry: the run's result, or its exception."""
        raise NotImplementedError(f"backend {self.name!r} has no population training")

    def relative_cost(self, config) -> float:
        """A rough relative training cost of a run (for splitting and ordering jobs); 1.0 when unknown."""
        return 1.0

    def in_loop_eval(self, config) -> str:
        """What this backend evaluates during training, in words (the dry runs print it). Default: the run's own
        task's held-out split every ``eval.every`` steps and at the end."""
        every = config.eval.every
        return f"every {every} steps and at the end" if every else "at the end only"

    def layout(self, config) -> dict[str, int] | None:
        """``{"nodes": N, "gpus_per_node": G}`` when the backend places its own workers across the job's nodes and
        GPUs (a sweep then derives the job's resources from it); None when one process trains on what it gets."""
        return None

    def disk_plan(self, config):
        """The bytes a run of ``config`` holds on disk at its peak (``harness.run.disk.DiskPlan``: checkpoints kept,
        exports, eval generations, logs, and the retention behind the counts), which a sweep checks against
        ``resources.disk_gb`` and the free space; None when the backend's runs keep little (no plan)."""
        return None

    def eval_plan(self, config):
        """The after-training vLLM engine over the run's GPUs (``harness.run.after_training.EngineSettings``: tensor
        and data parallel sizes, ``max_model_len``, memory utilisation, the plan's lines), raising ``ConfigError``
        when no setting fits; None: the ``eval:`` section's values as given (``auto``: one GPU)."""
        return None

    def worker_role(self, config, env: Mapping[str, str] = os.environ) -> str:
        """What this task of a possibly multi-node job does: ``head`` trains and owns the run directory; a
        ``worker`` lends its node to the head (``train`` is still called); an ``idle`` task has nothing to do.
        Default: task 0 is the head, every other task of a multi-node job is idle."""
        return IDLE if _slurm_task(env) != 0 and _slurm_nodes(env) > 1 else HEAD

    def export(self, config, run_dir: Path, out: Path | None = None) -> Path:
        """A Hugging Face model directory of the run's final policy that ``harness eval`` loads (written to ``out``
        when given, else where the backend keeps it), with ``harness_task.json`` naming the run."""
        raise NotImplementedError(f"backend {self.name!r} cannot export a model directory")

    def register_suites(self, registry) -> None:
        """Register the eval suites this backend provides (pocket: its synthetic tasks)."""

    def register_model_suite(self, registry, model_dir: Path) -> str | None:
        """Register and name the suite a model directory this backend exported brings (its run's own task);
        None when ``model_dir`` is not such an export."""
        return None

    def load_tokenizer(self, path: Path) -> Any | None:
        """The tokenizer of a model directory this backend wrote in its own format, else None."""
        return None

    def stage_files(self, config) -> dict[str, Callable[[], str]]:
        """Files this backend renders once for every run of ``config`` when a sweep is staged (``harness stage``),
        instead of each job rendering its own: a path relative to the stage directory -> a function returning the
        text (called only while staging, with ``config.eval.data_dir`` naming the staged suites). Default: none."""
        return {}


def harness_train_command(run_dir: str | Path) -> str:
    """``<this python> -m harness train <run_dir>/config.yaml --run-dir <run_dir>``, quoted for a shell."""
    run_dir = Path(run_dir)
    return (
        f"{shlex.quote(sys.executable)} -m harness train {shlex.quote(str(run_dir / 'config.yaml'))} "
        f"--run-dir {shlex.quote(str(run_dir))}"
    )


def _slurm_task(env: Mapping[str, str]) -> int:
    return int(env.get("SLURM_PROCID", "0") or 0)


def _slurm_nodes(env: Mapping[str, str]) -> int:
    return int(env.get("SLURM_NNODES", "1") or 1)
