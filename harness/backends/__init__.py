"""Training backends. Each registers under a name in ``BACKENDS``:

    @BACKENDS.register("pocket")
    class PocketBackend:
        def train(self, config, run_dir) -> dict: ...            # writes the run directory (docs/contracts.md)
        def launch_command(self, config, run_dir) -> str: ...    # what --dry-run prints
"""

from harness.registry import Registry

BACKENDS = Registry("backend", autoload=["harness.backends"])
