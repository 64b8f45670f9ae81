"""Modules imported on first use: commands that never touch a tensor (``harness methods``, sweep dry runs,
config validation) do not pay torch's ~1 s import. ``torch = lazy_import("torch")`` at the end of a module's
imports; the first attribute read imports the real module, and every name read is then kept on the proxy, so a
hot loop reads it as fast as a module attribute."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


class LazyModule:
    """Stands for the module ``name`` until one of its attributes is read."""

    def __init__(self, name: str):
        self.__dict__["_lazy_name"] = name

    def __getattr__(self, attr: str):
        value = getattr(importlib.import_module(self._lazy_name), attr)
        self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        loaded = self._lazy_name in sys.modules
        return f"<lazy module {self._lazy_name!r} ({'imported' if loaded else 'not imported yet'})>"


def lazy_import(name: str) -> ModuleType | LazyModule:
    """The module ``name`` when it is imported already, else a ``LazyModule`` that imports it when first used."""
    return sys.modules.get(name) or LazyModule(name)
