"""Every ``harness`` sub-command is one module of harness.commands with the same shape (ORDER, ``register(sub)``
adding exactly one parser named after the module, with a ``func``), found by the CLI in a fixed order; and the
command line itself (every sub-command's flags, defaults, choices and help) is the one pinned in cli_golden.json.

After an intended change of the command line: ``python tests/foundation/test_cli_commands.py --write``."""

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import harness.commands
from harness.cli import build_parser, command_modules

GOLDEN = Path(__file__).with_name("cli_golden.json")
HELP_ORDER = [  # `harness --help`, as it has always listed them (stage and doctor added by issue 34)
    "methods",
    "train",
    "export",
    "data",
    "stage",
    "doctor",
    "sweep",
    "status",
    "eval",
    "grade",
    "table",
    "plot",
    "report",
    "mechanism",
    "fit",
    "theory",
    "site",
]


def dump(parser: argparse.ArgumentParser) -> dict:
    """A parser as plain data: each action's flags, dest, nargs, default, type, choices, help, ...; sub-parsers
    nested by name, in their order (the handler functions are left out: only what a user sees and types)."""
    actions = []
    for a in parser._actions:
        row = {k: getattr(a, k) for k in ("option_strings", "dest", "nargs", "const", "required", "help", "metavar")}
        row["action"] = type(a).__name__
        row["default"] = (
            a.default if a.default is None or isinstance(a.default, (str, int, float, bool)) else repr(a.default)
        )
        row["type"] = getattr(a.type, "__name__", repr(a.type)) if a.type is not None else None
        if isinstance(a, argparse._SubParsersAction):
            row["choices"] = {name: dump(p) for name, p in a.choices.items()}
            row["listed"] = [[c.dest, c.help] for c in a._choices_actions]
        else:
            row["choices"] = list(a.choices) if a.choices is not None else None
        actions.append(row)
    return {
        "prog": parser.prog,
        "description": parser.description,
        "epilog": parser.epilog,
        "actions": actions,
        "exclusive": [[a.dest for a in g._group_actions] for g in parser._mutually_exclusive_groups],
        "defaults": sorted(k for k in parser._defaults if k != "func"),
    }


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_command_line_is_the_pinned_one():
    assert dump(build_parser()) == json.loads(GOLDEN.read_text())


def test_help_lists_the_commands_in_their_order():
    assert [c.dest for c in _commands(build_parser())._choices_actions] == HELP_ORDER
    assert [m.__name__.rpartition(".")[2] for m in command_modules()] == HELP_ORDER


def test_every_command_module_registers_exactly_one_parser_named_after_it():
    names = [m.name for m in pkgutil.iter_modules(harness.commands.__path__) if not m.name.startswith("_")]
    assert sorted(names) == sorted(HELP_ORDER)
    orders = []
    for name in names:
        module = importlib.import_module(f"harness.commands.{name}")
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        assert list(sub.choices) == [name], f"commands/{name}.py registers {list(sub.choices)}"
        assert callable(sub.choices[name].get_default("func")), f"commands/{name}.py sets no func"
        assert isinstance(module.ORDER, int)
        orders.append(module.ORDER)
    assert len(set(orders)) == len(orders)  # one place each


def test_the_shape_check_sees_a_module_that_registers_two_commands():
    sub = argparse.ArgumentParser().add_subparsers()
    sub.add_parser("table")
    sub.add_parser("plot")
    assert list(sub.choices) != ["table"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(dump(build_parser()), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDEN}")
