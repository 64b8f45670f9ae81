"""Training backends. Each registers under a name in ``BACKENDS`` and owns its settings:

    @BACKENDS.register("pocket")
    class PocketBackend:
        sections = {"model.warm_start": WarmStartOptions}  # config sections it types (dataclasses, see schema)
        def validate(self, config) -> None: ...          # called by load_config; raises ConfigError
        def train(self, config, run_dir, log) -> dict: ...  # returns the result record; the runner writes it
        def launch_command(self, config, run_dir) -> str: ...  # what --dry-run prints

Backend packages import nothing heavy at import time (options and validation are pure Python).
"""

from harness.errors import ConfigError, suggestion
from harness.registry import Registry, UnknownNameError

BACKENDS = Registry("backend", autoload=["harness.backends"])


def get_backend(name: str):
    """The backend registered as ``name`` (a class is instantiated); ConfigError (did-you-mean) when unknown."""
    try:
        obj = BACKENDS.get(name)
    except UnknownNameError:
        raise ConfigError(
            f"backend: {name!r} is not allowed.{suggestion(name, BACKENDS.names())} "
            f"Allowed: {', '.join(BACKENDS.names())}"
        ) from None
    return obj() if isinstance(obj, type) else obj


def owned_sections() -> dict:
    """Dotted config path -> options dataclass, for every section a backend owns."""
    out = {}
    for name in BACKENDS.names():
        out.update(getattr(BACKENDS.get(name), "sections", {}))
    return out
