"""OpenRLHF 0.11.2 backend (Ray + vLLM + DeepSpeed, GPU clusters) running the harness method objects.

Importing this package needs no OpenRLHF: ``launch_command`` (``--dry-run``) is pure Python, and ``train``
raises an error naming the extra to install when OpenRLHF is missing. See docs/openrlhf.md.
"""

import os
from pathlib import Path

from harness.backends import register_backend
from harness.backends.base import HEAD, WORKER, Backend
from harness.backends.openrlhf import options


@register_backend
class OpenRLHFBackend(Backend):
    """``train(config, run_dir)`` runs OpenRLHF with the method plugged in; ``launch_command`` prints it."""

    name = "openrlhf"
    sections = {"openrlhf": options.OpenRLHFOptions}
    recorded_by_every_run = ("openrlhf",)  # a core section when run ids were published: every run records it
    capabilities = frozenset({"in_loop_suites", "places_workers", "checkpoint_on_request"})
    run_files = ("openrlhf.log", "openrlhf.task*.log")  # the launcher's log; one per SLURM task of a multi-node run
    packages = ("openrlhf",)

    def build_section(self, path, value):
        """The ``openrlhf:`` section typed and checked on its own (``options.parse_options``)."""
        return options.parse_options(value)

    def canonical(self, data):
        """Upstream's is_correction_* flags in ``openrlhf.extra_flags`` rewritten as ``method.rollout_correction``."""
        from harness.backends.openrlhf import upstream_correction

        return upstream_correction.canonical(data)

    def validate(self, config) -> None:
        """Run every launch check now (pure Python), as pocket does, and the after-training engine's plan."""
        from harness.backends.openrlhf import evalplan
        from harness.backends.openrlhf.flags import build_plan

        build_plan(config, "run-dir")
        evalplan.plan(config)

    def launch_command(self, config, run_dir) -> str:
        """The launch (with its memory plan), then the disk plan and the evaluation plan, as ``#`` lines."""
        from harness.backends.openrlhf.flags import launch_command, typed

        cfg = typed(config)  # a loaded config or a plain mapping
        plans = [*self.disk_plan(cfg).lines(), *(getattr(self.eval_plan(cfg), "lines", None) or ())]
        return "\n".join([launch_command(cfg, run_dir), *(f"# {line}" for line in plans)])

    def disk_plan(self, config):
        """Checkpoints kept (retention), the final model, generations, logs (diskplan.py)."""
        from harness.backends.openrlhf import diskplan
        from harness.backends.openrlhf.flags import build_plan

        return diskplan.plan(config, build_plan(config, "run-dir").memory)

    def eval_plan(self, config):
        """The after-training vLLM engine over the head node's GPUs (evalplan.py)."""
        from harness.backends.openrlhf import evalplan

        return evalplan.plan(config)

    def train(self, config, run_dir, log=None):
        from harness.backends.openrlhf.runner import train

        return train(config, run_dir, log=log)

    def in_loop_eval(self, config) -> str:
        """OpenRLHF scores in its loop only ``eval.suites`` (or ``openrlhf.eval_dataset``), every ``eval.every``."""
        ec, dataset = config.eval, options.options_of(config).eval_dataset
        if not ec.every or not (ec.suites or dataset):
            return "off"
        return f"every {ec.every} steps on {', '.join(ec.suites) or dataset}"

    def stage_files(self, config) -> dict:
        """The in-loop eval set of ``eval.suites``, rendered once for every run that evaluates on the same suites
        (``evalset.staged_name``); each launch copies it instead of rendering its own."""
        from harness.backends.openrlhf import evalset
        from harness.backends.openrlhf.flags import build_plan

        spec = build_plan(config, "run-dir").plugin.get("eval")
        if not spec or not spec.get("suites"):
            return {}
        return {evalset.staged_name(spec): lambda: evalset.render(spec)}

    def layout(self, config) -> dict:
        """Ray places the actor, reference and vLLM workers over all of the job's nodes and GPUs."""
        section = options.options_of(config)
        return {"nodes": section.nodes, "gpus_per_node": section.gpus_per_node}

    def worker_role(self, config, env=os.environ) -> str:
        """Every non-head task of a multi-node SLURM job joins the head's Ray cluster (unless Ray runs already)."""
        from harness.backends.openrlhf.runner import is_worker_task

        return WORKER if is_worker_task(env) else HEAD

    def export(self, config, run_dir, out=None) -> Path:
        """``checkpoints/final`` (the Hugging Face model OpenRLHF saves when training ends), marked with the run it
        came from, with its model card and the umask's file modes; with ``out``, a copy there."""
        import shutil

        from harness.run.exported import complete_export

        final = Path(run_dir) / "checkpoints" / "final"
        if not (final / "config.json").is_file():
            raise FileNotFoundError(f"{run_dir}: no final model ({final}/config.json); train the run to its end first")
        if out is not None:
            out = Path(out)
            if out.exists() and any(out.iterdir()):
                raise ValueError(f"--out {out}: not empty; give a new folder (nothing is overwritten)")
            shutil.copytree(final, out, dirs_exist_ok=True)
            final = out
        return complete_export(final, config, run_dir, config.train.steps)
