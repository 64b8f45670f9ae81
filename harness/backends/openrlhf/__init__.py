"""OpenRLHF 0.11.2 backend (Ray + vLLM + DeepSpeed, GPU clusters) running the harness method objects.

Importing this package needs no OpenRLHF: ``launch_command`` (``--dry-run``) is pure Python, and ``train``
raises an error naming the extra to install when OpenRLHF is missing. See docs/openrlhf.md.
"""

from harness.backends import BACKENDS
from harness.backends.openrlhf import options


@BACKENDS.register("openrlhf")
class OpenRLHFBackend:
    """``train(config, run_dir)`` runs OpenRLHF with the method plugged in; ``launch_command`` prints it."""

    name = "openrlhf"
    sections = {"openrlhf": options.OpenRLHFOptions}

    @staticmethod
    def validate(config) -> None:
        """Type the ``openrlhf:`` section and run every launch check now (pure Python), as pocket does."""
        from harness.backends.openrlhf.flags import build_plan

        options.type_section(config)
        build_plan(config, "run-dir")

    @staticmethod
    def launch_command(config, run_dir) -> str:
        from harness.backends.openrlhf.flags import launch_command

        return launch_command(config, run_dir)

    @staticmethod
    def train(config, run_dir, log=None) -> dict:
        from harness.backends.openrlhf.runner import train

        return train(config, run_dir, log=log)
