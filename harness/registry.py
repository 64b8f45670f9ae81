"""One registry class for methods, advantage estimators, suites, tasks and backends.

Duplicate names are an error; an unknown name gets a "did you mean" and the list of known names.
Built-in entries live in packages that are imported lazily on the first lookup (``autoload``), so
``import harness`` stays cheap and a new method is one file that registers itself.

    from harness.registry import Registry
    SUITES = Registry("suite", autoload=["harness.evals.suites"])

    @SUITES.register("aime24")
    class Aime24: ...

    SUITES.get("aime42")  # UnknownNameError: unknown suite 'aime42'. Did you mean 'aime24'? Known: ...

Outside this repository: a package declares entry points in the registry's group (``entropy_harness.methods``,
``entropy_harness.advantages``, ``entropy_harness.tasks``, ``entropy_harness.suites``,
``entropy_harness.backends``), each naming a module that registers on import (or an object, registered under the
entry point's name); they load on the first lookup, like the built-ins. A name ``package.module:Name`` imports
that module on lookup and returns what it registered as ``Name`` (no installation needed); a registry with an
``adopt`` hook (methods) registers an object the module did not register, under that reference.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from importlib import metadata
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

    def __init__(
        self,
        what: str,
        autoload: Iterable[str] = (),
        entry_points: str | None = None,
        adopt: Callable[[str, T], T] | None = None,
    ):
        self.what = what
        self._adopt = adopt  # (reference, object) -> the object registered under the reference; TypeError if unfit
        self._items: dict[str, T] = {}
        self._autoload = list(autoload)
        self._group = entry_points  # entry-point group of installed packages that extend this registry
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
            if self._group:
                self._load_entry_points()

    def _load_entry_points(self) -> None:
        for ep in metadata.entry_points(group=self._group):
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - one broken plugin must not hide the built-ins
                dist = getattr(ep.dist, "name", "?")
                warnings.warn(
                    f"{self.what} entry point {ep.name!r} = {ep.value!r} of package {dist!r} failed to load "
                    f"({type(e).__name__}: {e}); its {self.what}s are not available",
                    stacklevel=3,
                )
                continue
            if not isinstance(obj, types.ModuleType) and ep.name not in self._items:
                self.register(ep.name, obj)

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._items[name]
        except KeyError:
            if ":" in name:
                return self._import_reference(name)
            raise UnknownNameError(did_you_mean(name, self._items, self.what)) from None

    def _import_reference(self, ref: str) -> T:
        """``package.module:Name``: import the module; ``Name`` is what it registered here, or what ``adopt``
        registers under ``ref``."""
        module, _, attr = ref.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise UnknownNameError(f"{self.what} {ref!r}: cannot import it ({type(e).__name__}: {e})") from None
        if any(item is obj for item in self._items.values()):
            return obj
        if self._adopt is not None:
            try:
                return self._adopt(ref, obj)
            except (TypeError, ValueError) as e:
                raise UnknownNameError(f"{self.what} {ref!r}: {e}") from None
        raise UnknownNameError(
            f"{self.what} {ref!r}: {module} was imported but {attr} is not a registered {self.what} "
            f"(register it in its module, e.g. with the registry's decorator)"
        )

    def name_of(self, obj: T) -> str | None:
        """The name ``obj`` is registered under (None when it is not)."""
        self._load()
        return next((n for n, item in self._items.items() if item is obj), None)

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
