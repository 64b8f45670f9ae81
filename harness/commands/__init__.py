"""The ``harness`` sub-commands: one module per command, named after it (``harness fit`` is ``commands/fit.py``).

Every command module has the same shape:

- ``ORDER``: an int, the command's place in ``harness --help`` (ascending);
- ``register(sub)``: adds exactly one parser, named after the module, to the argparse sub-parsers ``sub`` and
  sets its ``func`` default (``p.set_defaults(func=run)``): the function that runs it, ``args -> exit code``;
- light imports at module level (heavy ones, torch or pandas, inside the functions: ``harness --help`` stays fast).

``harness.cli`` finds the commands with pkgutil; a module whose name starts with ``_`` is a helper shared by
commands (``_common.py``), not a command.
"""
