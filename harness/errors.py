"""The config error and the one did-you-mean helper every part of the harness uses (no other imports)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """An invalid run config. The message names the key path and what is allowed."""


def suggestion(name, known: Iterable, cutoff: float = 0.5) -> str:
    """' Did you mean 'x'?' for the (up to 3) closest known names, or '' when none is close."""
    close = difflib.get_close_matches(str(name), sorted(map(str, known)), n=3, cutoff=cutoff)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def did_you_mean(name, known: Iterable, what: str) -> str:
    """Error text naming the unknown ``name``, the closest known names and the full list."""
    known = sorted(map(str, known))
    return f"unknown {what} {name!r}.{suggestion(name, known)} Known {what}s: {', '.join(known) or '(none)'}"
