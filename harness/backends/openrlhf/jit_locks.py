"""Stale build locks of DeepSpeed's JIT ops (``$TORCH_EXTENSIONS_DIR/<op>/lock``).

torch's ``FileBaton`` (which DeepSpeed's op builder uses) marks a build in progress by an empty ``lock`` file and
waits, without a timeout, while it exists. A process killed during a build (a time limit, a test timeout, Ctrl-C)
leaves the file behind, and every later job that loads the op waits forever in ``FileBaton.wait`` (seen three
times on the shared dev machine: the rehearsal logged nothing for 10+ minutes). An op builds in a minute or two, so
a lock older than ``MAX_AGE_S`` is stale: it is removed, with a warning, before the launcher starts Ray.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

MAX_AGE_S = 1800.0  # a build that old is dead (fused_adam/cpu_adam/shm_comm build in 1-3 min here, under load)


def extensions_dir(env: dict | None = None) -> Path:
    """Where torch builds JIT ops: ``TORCH_EXTENSIONS_DIR``, else torch's default under the cache folder."""
    env = os.environ if env is None else env
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "torch_extensions"


def clear_stale(root: Path, max_age_s: float = MAX_AGE_S, now: float | None = None, log=print) -> list[Path]:
    """Remove ``root/**/lock`` files older than ``max_age_s``; return them. Younger ones (a build that may be
    running, perhaps on another node) are left alone."""
    now = time.time() if now is None else now
    removed = []
    for lock in sorted(Path(root).glob("**/lock")) if Path(root).is_dir() else []:
        try:
            age = now - lock.stat().st_mtime
            if age > max_age_s:
                lock.unlink()
                removed.append(lock)
                log(f"harness: warning: removed a stale JIT build lock {lock} ({age / 60:.0f} min old: a killed build)")
        except FileNotFoundError:  # another job removed it first
            continue
    return removed
