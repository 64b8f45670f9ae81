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
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        args = parse_intermixed(parser, argv, extra)
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


def parse_intermixed(parser: argparse.ArgumentParser, argv: list[str], extra: list[str]) -> argparse.Namespace:
    """``argv`` parsed by its command's own parser with options and positionals in any order (``harness train
    CFG --dry-run train.steps=3``: argparse alone fills ``nargs="*"`` positionals only before the first option);
    what is still unknown is refused with the command's own usage."""
    names, command = [], parser
    while True:  # down to the (sub-)command argv names: harness data check ...
        sub = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        nxt = sub[0].choices.get(argv[len(names)]) if sub and len(argv) > len(names) else None
        if nxt is None:
            break
        names.append(argv[len(names)])
        command = nxt
    if command is parser or sub:  # no command, or one with sub-commands of its own: no intermixing
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    args = command.parse_intermixed_args(argv[len(names) :])
    for action, name in zip(_subparser_actions(parser, names), names):
        setattr(args, action.dest, name)
    return args


def _subparser_actions(parser: argparse.ArgumentParser, names: list[str]) -> list:
    """The sub-command actions along ``names`` (their ``dest`` records the chosen name)."""
    out = []
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.append(action)
        parser = action.choices[name]
    return out


def _one_line(e: BaseException) -> str:
    """The message of ``e`` (an OS error as ``FILE: reason``, never its errno tuple)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return str(e) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
