"""One import root: the wheel installs only ``harness`` (methods/, baselines/ and evals/ mapped inside it), and the
package list in pyproject.toml names every package folder, so a new sub-package cannot be left out of the wheel."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.helpers.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"methods": "harness.methods", "baselines": "harness.baselines", "evals": "harness.evals"}


def _setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_name(folder: Path) -> str:
    rel = folder.relative_to(ROOT).parts
    return ".".join((MAPPED[rel[0]].split(".") + list(rel[1:])) if rel[0] in MAPPED else rel)


def test_the_package_list_names_every_package_folder_and_maps_the_three_top_folders_into_harness():
    """Every folder holding files is a listed package: the code packages and the data folders (samples, assets,
    fixtures, lm-eval tasks), for which setuptools otherwise prints a "Package would be ignored" warning each."""
    cfg = _setuptools_config()
    on_disk = {
        _package_name(f.parent)
        for top in ["harness", *MAPPED]
        for f in (ROOT / top).rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and not f.name.startswith(".")
    }
    assert set(cfg["packages"]) == on_disk
    assert cfg["package-dir"] == {v: k for k, v in MAPPED.items()}
    assert all(name.split(".")[0] == "harness" for name in cfg["packages"])


def test_the_three_folders_import_under_harness_only(tmp_path):
    """Only the harness package on the path (as a user's site-packages would have it): the three folders import as
    harness.*, and no top-level methods / evals / baselines exists."""
    (tmp_path / "harness").symlink_to(ROOT / "harness")
    code = (
        "import importlib.util as u, harness.methods.kl_cov, harness.evals.suites, harness.baselines.grpo;"
        "print([u.find_spec(n) is None for n in ('methods', 'evals', 'baselines')])"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[True, True, True]"


def test_the_wheel_holds_one_top_level_package_with_the_mapped_folders_and_their_data(tmp_path):
    pytest.importorskip("setuptools")
    out, wheel = build_wheel(tmp_path)
    assert wheel is not None, out.stderr[-2000:]
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"harness"}
    for path in (
        "harness/methods/kl_cov.py",
        "harness/baselines/prime.py",
        "harness/evals/sandbox.py",
        "harness/evals/data/fixtures/aime24.jsonl",
        "harness/evals/lm_eval_tasks/utils.py",  # the tasks' !function hooks
        "harness/evals/lm_eval_tasks/harness_math500.yaml",
        "harness/data/samples/dapo-math-17k.parquet",  # harness data prepare --source sample, the rehearsal
        "harness/site/assets/site.js",
    ):
        assert path in names, path
