"""The pocket backend: real RL on tiny transformers on a CPU (or GPU), no downloads. See docs/pocket.md."""

from harness.backends import BACKENDS
from harness.backends.pocket import options


@BACKENDS.register("pocket")
class PocketBackend:
    """Trains one run in-process. ``train`` returns the result fields; the runner writes result.json."""

    sections = {"model.warm_start": options.WarmStartOptions}

    def validate(self, config) -> None:
        options.validate(config)

    def train(self, config, run_dir, log=print) -> dict:
        from .trainer import PocketTrainer

        return PocketTrainer(config, run_dir, log=log).run()

    def launch_command(self, config, run_dir) -> str:
        return f"python -m harness train {run_dir}/config.yaml --run-dir {run_dir}"
