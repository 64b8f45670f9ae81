"""Configs and fault injectors shared by the fault tests."""

import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from tests.helpers.sweep_targets import tiny_pocket_base

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

# a short supervised warm start (about 3 s here): what a pocket run does by default, so the faults meet it too
WARM_START = {
    "enabled": "true",
    "target_acc": 0.99,
    "max_steps": 100,
    "min_steps": 0,
    "check_every": 50,
    "batch_size": 16,
}


def warm_base(tmp_path: Path, steps: int = 3, checkpoint_every: int = 1, **warm) -> dict:
    """A tiny pocket run with a warm start; its cache lives under ``tmp_path`` (trained once per test)."""
    base = tiny_pocket_base(steps=steps, checkpoint_every=checkpoint_every)
    base["model"]["warm_start"] = {**WARM_START, **warm}
    base["model"]["cache_dir"] = str(tmp_path / "cache")
    return base


def write_cfg(tmp_path: Path, base: dict, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(base))
    return p


KILL_AFTER_CHECKPOINT = r"""
import os, signal, sys
from harness.backends.pocket import trainer
save = trainer.PocketTrainer.save_checkpoint
def save_then_die(self, step):
    save(self, step)
    if step == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)  # the node is lost right after this checkpoint
trainer.PocketTrainer.save_checkpoint = save_then_die
from harness.cli import main
main(["train", sys.argv[1], "--run-dir", sys.argv[2]])
"""


def kill_after_checkpoint(cfg: Path, run_dir: Path, step: int) -> None:
    """Train ``cfg`` in a child process that is SIGKILLed right after it saved the checkpoint of ``step``."""
    p = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_CHECKPOINT, str(cfg), str(run_dir), str(step)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert not (run_dir / "result.json").exists()


def rows_without_times(path: Path) -> list[dict]:
    import json

    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def snapshot(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` with its bytes (what a refusal must leave unchanged), but the lock file: a refused
    trainer holds the lock while it checks, which clears a killed holder's stale name from it."""
    return {
        str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".run.lock"
    }


@pytest.fixture
def fx():
    """The helpers above, for the test modules (conftest is not importable under --import-mode=importlib)."""
    return types.SimpleNamespace(
        warm_base=warm_base,
        write_cfg=write_cfg,
        kill_after_checkpoint=kill_after_checkpoint,
        rows_without_times=rows_without_times,
        snapshot=snapshot,
        ENV=ENV,
        REPO=REPO,
    )
