"""Extension points: a researcher's own package adds a method and an advantage estimator through entry points
(``entropy_harness.methods`` / ``entropy_harness.advantages``) and trains with them, no fork; a config may also
name ``package.module:Name`` directly. The package is really built and installed (into a folder on PYTHONPATH,
so the test never changes the project's environment) and the run is a real ``harness train`` subprocess."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.sweep_targets import tiny_pocket_base

PLUGIN = Path(__file__).parent / "data" / "toy_plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The toy plugin pip-installed (no deps, no build isolation: offline) into its own folder."""
    src, target = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("site")
    shutil.copytree(PLUGIN, src / "toy_plugin", dirs_exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
    out = subprocess.run([*cmd, str(src / "toy_plugin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert list(target.glob("toy_entropy_plugin-*.dist-info"))
    return target


def _train(tmp_path, site, method: dict, extra_path: str = "") -> subprocess.CompletedProcess:
    cfg = tiny_pocket_base(steps=2)
    cfg["method"] = method
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), extra_path) if p)}
    cmd = [sys.executable, "-m", "harness", "train", "run.yaml", "--run-dir", "rd"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_an_installed_packages_method_trains_through_entry_points(tmp_path, site):
    out = _train(tmp_path, site, {"name": "toy_reinforce"})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "rd" / "result.json").read_text())
    assert result["status"] == "completed" and result["method"] == "toy_reinforce"
    assert result["method_config"]["advantage"] == "toy_centred"
    assert "eps_low" not in result["method_config"]  # not a clipping method
    rows = [json.loads(x) for x in (tmp_path / "rd" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("entropy" in r for r in rows)


def test_harness_methods_lists_the_plugin(tmp_path, site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-m", "harness", "methods"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "toy_reinforce" in out.stdout


def test_a_config_may_name_module_and_class_and_keeps_the_reference(tmp_path, site):
    """Without entry points (a plain folder on PYTHONPATH): ``toy_plugin.methods:ToyReinforce``."""
    bare = tmp_path / "bare"
    shutil.copytree(site / "toy_plugin", bare / "toy_plugin")  # the module alone: no dist-info, no entry points
    cfg = tiny_pocket_base(steps=2)
    cfg["method"] = {"name": "toy_plugin.methods:ToyReinforce"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(bare)}
    cmd = [sys.executable, "-m", "harness", "train", "run.yaml", "--run-dir", "rd"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    saved = yaml.safe_load((tmp_path / "rd" / "config.yaml").read_text())
    assert saved["method"]["name"] == "toy_plugin.methods:ToyReinforce"  # a sweep worker re-imports it


def test_a_bad_reference_is_one_clear_error(tmp_path, site):
    out = _train(tmp_path, site, {"name": "toy_plugin.methods:NoSuchClass"})
    assert out.returncode == 2 and "cannot import it" in out.stderr and "NoSuchClass" in out.stderr
