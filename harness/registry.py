"""One registry class for methods, advantage estimators, suites, tasks and backends.

Duplicate names are an error; an unknown name gets a "did you mean" and the list of known names.
Built-in entries live in packages that are imported lazily on the first lookup (``autoload``), so
``import harness`` stays cheap and a new method is one file that registers itself.

    from harness.registry import Registry
    SUITES = Registry("suite", autoload=["harness.evals.suites"])

    @SUITES.register("aime24")
    class Aime24: ...

    SUITES.get("aime42")  # UnknownNameError: unknown suite 'aime42'. Did you mean 'aime24'? Known: ...
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from harness.errors import did_you_mean, suggestion  # noqa: F401  (re-exported)

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """Unknown registry name. A KeyError (dict-like lookup) and a ValueError (bad user input)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(ValueError):
    """A name registered twice with different targets."""


def import_submodules(package: str) -> None:
    """Import every module of ``package`` so that modules registering themselves take effect."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(getattr(pkg, "__path__", []), prefix=package + "."):
        if not info.name.rsplit(".", 1)[-1].startswith("_"):
            importlib.import_module(info.name)


class Registry(Generic[T]):
    """A name -> object map with did-you-mean errors, duplicate protection and lazy autoload."""

    def __init__(self, what: str, autoload: Iterable[str] = ()):
        self.what = what
        self._items: dict[str, T] = {}
        self._autoload = list(autoload)
        self._loaded = False
        self._lock = threading.RLock()

    # -- registration -------------------------------------------------------------------------
    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; without ``obj`` returns a decorator."""

        def deco(target: T) -> T:
            with self._lock:
                existing = self._items.get(name)
                if existing is not None and existing is not target and not _same_definition(existing, target):
                    raise DuplicateNameError(
                        f"{self.what} {name!r} is already registered (by {_where(existing)}); "
                        f"pick another name for {_where(target)}"
                    )
                self._items[name] = target
            return target

        return deco if obj is None else deco(obj)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)

    # -- lookup -------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for package in self._autoload:
                import_submodules(package)

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(did_you_mean(name, self._items, self.what)) from None

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


def _where(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _same_definition(a: object, b: object) -> bool:
    """True when a module was imported twice (e.g. as a file and as a package module); instances (backends)
    compare by their classes."""
    if not hasattr(a, "__qualname__") and not hasattr(b, "__qualname__"):
        a, b = type(a), type(b)
    return (
        getattr(a, "__qualname__", None) == getattr(b, "__qualname__", object())
        and getattr(a, "__module__", "").rsplit(".", 1)[-1] == getattr(b, "__module__", "").rsplit(".", 1)[-1]
    )
