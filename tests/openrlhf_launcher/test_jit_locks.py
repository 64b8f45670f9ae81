"""A DeepSpeed JIT build killed mid-way leaves ``<op>/lock``; torch's FileBaton then waits forever. The launcher
removes locks older than any real build before it starts (harness/backends/openrlhf/jit_locks.py)."""

import os
import time

from harness.backends.openrlhf.jit_locks import MAX_AGE_S, clear_stale, extensions_dir


def test_only_old_locks_are_removed(tmp_path):
    now = time.time()
    stale, fresh = tmp_path / "fused_adam" / "lock", tmp_path / "cpu_adam" / "lock"
    for lock, age in ((stale, MAX_AGE_S + 60), (fresh, 30)):
        lock.parent.mkdir()
        lock.touch()
        os.utime(lock, (now - age, now - age))
    said = []
    assert clear_stale(tmp_path, now=now, log=said.append) == [stale]
    assert not stale.exists() and fresh.exists()
    assert "stale JIT build lock" in said[0] and "fused_adam" in said[0]
    assert clear_stale(tmp_path / "missing") == []


def test_the_folder_torch_builds_in():
    assert extensions_dir({"TORCH_EXTENSIONS_DIR": "/x/ext"}).as_posix() == "/x/ext"
    assert extensions_dir({"XDG_CACHE_HOME": "/c"}).as_posix() == "/c/torch_extensions"
