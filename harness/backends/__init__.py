"""Training backends, each one instance of a ``harness.backends.base.Backend`` subclass registered by name.

    from harness.backends import get_backend
    backend = get_backend(config.backend)      # ConfigError with did-you-mean when unknown
    backend.train(config, run_dir, log)        # -> RunResult; backend.export(...), .layout(...), .worker_role(...)

The protocol (what a backend provides and what callers may ask) is documented in ``base.py``. Backend packages
import nothing heavy at import time (options and validation are pure Python).
"""

from __future__ import annotations

from pathlib import Path

from harness.backends.base import HEAD, IDLE, WORKER, Backend  # noqa: F401  (re-exported)
from harness.errors import ConfigError, suggestion
from harness.registry import Registry, UnknownNameError

BACKENDS: Registry[Backend] = Registry(
    "backend", autoload=["harness.backends"], entry_points="entropy_harness.backends"
)
DEFAULT_BACKEND = "pocket"  # the backend of a config that names none


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: register one instance of ``cls`` under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__qualname__}: a backend needs a class attribute 'name'")
    BACKENDS.register(cls.name, cls())
    return cls


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``; ConfigError (did-you-mean) when unknown."""
    try:
        return BACKENDS.get(name)
    except UnknownNameError:
        raise ConfigError(
            f"backend: {name!r} is not allowed.{suggestion(name, BACKENDS.names())} "
            f"Allowed: {', '.join(BACKENDS.names())}"
        ) from None


def _all() -> list[Backend]:
    return [BACKENDS.get(name) for name in BACKENDS.names()]


def owned_sections() -> dict:
    """Dotted config path -> options dataclass, for every section a backend owns."""
    out = {}
    for backend in _all():
        out.update(backend.sections)
    return out


def section_owners() -> dict[str, list[str]]:
    """Dotted config path of every backend-owned section -> the backends that declare it."""
    out: dict[str, list[str]] = {}
    for backend in _all():
        for path in backend.sections:
            out.setdefault(path, []).append(backend.name)
    return out


def recorded_sections() -> tuple[str, ...]:
    """Top-level backend sections every run config records (``{}`` on other backends' runs): see ``base.py``."""
    return tuple(dict.fromkeys(s for backend in _all() for s in backend.recorded_by_every_run))


def default_model() -> str | None:
    return get_backend(DEFAULT_BACKEND).default_model


def default_task() -> str | None:
    return get_backend(DEFAULT_BACKEND).default_task


def run_file_patterns() -> tuple[str, ...]:
    """Glob patterns of the files any backend writes into a run directory."""
    return tuple(dict.fromkeys(p for backend in _all() for p in backend.run_files))


def provenance_packages() -> tuple[str, ...]:
    """Distributions any backend runs on, whose versions a run records."""
    return tuple(dict.fromkeys(p for backend in _all() for p in backend.packages))


def register_suites(registry) -> None:
    """Let every backend register the eval suites it provides (called once by the suite registry)."""
    for name in BACKENDS.names():
        BACKENDS.get(name).register_suites(registry)


def register_model_suite(registry, model_dir) -> str | None:
    """The suite a backend's exported model directory brings (its run's own task), registered; None when none."""
    for name in BACKENDS.names():
        suite = BACKENDS.get(name).register_model_suite(registry, Path(str(model_dir)))
        if suite is not None:
            return suite
    return None


def load_tokenizer(path: str | Path):
    """The tokenizer of a model directory written by a backend in its own format, else None (use AutoTokenizer)."""
    for name in BACKENDS.names():
        tok = BACKENDS.get(name).load_tokenizer(Path(path))
        if tok is not None:
            return tok
    return None
