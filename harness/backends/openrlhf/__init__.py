"""OpenRLHF 0.11.2 backend (Ray + vLLM + DeepSpeed, GPU clusters) running the harness method objects.

Importing this package needs no OpenRLHF: ``launch_command`` (``--dry-run``) is pure Python, and ``train``
raises an error naming the extra to install when OpenRLHF is missing. See docs/openrlhf.md.
"""

from harness.backends import BACKENDS


@BACKENDS.register("openrlhf")
class OpenRLHFBackend:
    """``train(config, run_dir)`` runs OpenRLHF with the method plugged in; ``launch_command`` prints it."""

    name = "openrlhf"

    @staticmethod
    def launch_command(config, run_dir) -> str:
        from harness.backends.openrlhf.flags import launch_command

        return launch_command(config, run_dir)

    @staticmethod
    def train(config, run_dir, log=None) -> dict:
        from harness.backends.openrlhf.runner import train

        return train(config, run_dir, log=log)
