"""The ``harness`` command line: one sub-command per module of ``harness.commands`` (its docstring: the shape of a
command module), found with pkgutil and listed in the order of their ``ORDER``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import harness.commands


def command_modules() -> list:
    """Every command module of ``harness.commands`` (not the ``_``-named helpers), in ``ORDER``."""
    names = [m.name for m in pkgutil.iter_modules(harness.commands.__path__) if not m.name.startswith("_")]
    modules = [importlib.import_module(f"harness.commands.{name}") for name in names]
    return sorted(modules, key=lambda m: m.ORDER)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Entropy-control methods for RL of reasoning LMs: train, sweep, evaluate, "
        "tabulate, fit the entropy law, test the theory.",
        epilog="`harness COMMAND --help` for one command; README.md for the whole picture.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:  # user errors, unreadable or unwritable files: one clear line, non-zero exit
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2


def _one_line(e: BaseException) -> str:
    """The message of ``e`` (an OS error as ``FILE: reason``, never its errno tuple)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return str(e) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
