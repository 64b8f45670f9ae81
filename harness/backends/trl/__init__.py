"""TRL 1.16.0 backend: Hugging Face TRL's ``GRPOTrainer`` running the harness method objects (docs/backends.md).

Importing this package needs no TRL: ``validate`` is pure Python, and ``train`` raises an error naming the version
to install when TRL is missing or another version. It trains the pocket tasks (their exact verifiers as the
reward) on pocket sizes (pocket's warm start) or transformers models, in-process on CPU or one GPU.
"""

from pathlib import Path

from harness.backends import register_backend
from harness.backends.base import Backend
from harness.backends.pocket.options import WarmStartOptions
from harness.backends.trl import options


@register_backend
class TRLBackend(Backend):
    """``train`` runs ``HarnessGRPOTrainer`` in this process; the runner writes result.json."""

    name = "trl"
    sections = {"model.warm_start": WarmStartOptions}  # pocket's warm start (its sizes train here too); else core
    capabilities = frozenset({"entropy_after_update"})

    def validate(self, config) -> None:
        options.validate(config)

    def train(self, config, run_dir, log=print):
        from harness.backends.trl.loop import train

        return train(config, run_dir, log=log)

    def export(self, config, run_dir, out=None) -> Path:
        """The newest checkpoint as a model directory: ``out``, else ``RUN/export/step_<N>`` (made once, reused)."""
        from harness.backends.trl.export import export_run

        return export_run(config, Path(run_dir), out)
