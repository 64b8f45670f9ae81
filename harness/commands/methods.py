"""`harness methods [NAME]`: the registered methods, their hyperparameters, defaults and docs."""

from __future__ import annotations

import dataclasses
import inspect

import harness  # the method registries load on first use (harness.METHODS): --help stays torch-free


def register(sub) -> None:
    p = sub.add_parser("methods", help="list methods and their hyperparameters")
    p.add_argument("name", nargs="?", help="show one method in full")
    p.set_defaults(func=run)


def describe(name: str) -> str:
    cls = harness.METHODS.get(name)
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    lines = [f"{name}: {inspect.getdoc(cls).splitlines()[0] if cls.__doc__ else ''}", ""]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        choices = f" [{'|'.join(map(str, f.metadata['choices']))}]" if f.metadata.get("choices") else ""
        lines.append(f"  {f.name:<18} = {default!r:<14} {f.metadata.get('help', '')}{choices}")
    return "\n".join(lines + ["", doc])


def run(args) -> int:
    if args.name:
        print(describe(args.name))
        return 0
    for name in harness.METHODS.names():
        cls = harness.METHODS.get(name)
        print(f"{name:<14} {(inspect.getdoc(cls) or '').splitlines()[0]}")
    print(f"\nadvantage estimators: {', '.join(harness.ADVANTAGES.names())}  (method option advantage=...)")
    return 0
