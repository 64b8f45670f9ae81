"""A backend without its own launch command gets ``harness train <cell>/config.yaml --run-dir <cell>``, and that
command really runs (it used to be ``harness train --config ...``, an option that does not exist)."""

import os
import shlex
import subprocess

import yaml

from harness.backends import BACKENDS, Backend
from harness.backends.base import harness_train_command
from harness.sweeps.cells import launch_command
from tests.helpers.sweep_targets import tiny_pocket_base


class NoLaunch(Backend):
    name = "test_nolaunch"

    def train(self, config, run_dir, log=None):
        return {}


def test_fallback_command_is_harness_train_and_runs(tmp_path):
    BACKENDS.register("test_nolaunch", NoLaunch())
    base = tiny_pocket_base()
    del base["model"]["warm_start"]  # pocket's section: refused on another backend
    try:
        cmd = launch_command({**base, "backend": "test_nolaunch"}, tmp_path)
        assert cmd == harness_train_command(tmp_path)
    finally:
        BACKENDS.unregister("test_nolaunch")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_pocket_base()))
    argv = shlex.split(harness_train_command(tmp_path)) + ["--dry-run"]
    assert argv[1:4] == ["-m", "harness", "train"]
    out = subprocess.run(argv, capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert "# run id" in out.stdout and not (tmp_path / "result.json").exists()
