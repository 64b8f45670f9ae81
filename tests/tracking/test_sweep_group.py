"""A sweep's name reaches its cells' trackers as the W&B group (harness/sweeps/cells.py: a non-measuring
``logging.wandb_group``), without changing any cell's id; a group the spec sets is kept."""

import sys
from pathlib import Path

import pytest
import yaml

from harness.run.config import load_config, run_id_of
from harness.run.runner import run
from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from tests.helpers import sweep_targets as testing

sys.path.insert(0, str(Path(__file__).parent))
from tracker_files import wandb_runs  # noqa: E402


def _cells(logging=None):
    base = testing.tiny_pocket_base(steps=1)
    base["logging"] = {**base.get("logging", {}), **(logging or {})}
    return expand(load_spec({"name": "grp", "base": base, "grid": {"method": [{"name": "grpo"}]}, "seeds": [0, 1]}))


def test_cells_get_the_sweep_name_as_group_and_keep_their_ids(tmp_path):
    for cell in _cells():
        d = C.materialise(cell, tmp_path, "my-sweep", command="true")
        written = yaml.safe_load((d / "config.yaml").read_text())
        assert written["logging"]["wandb_group"] == "my-sweep"
        assert run_id_of(written) == cell.id and d.name.endswith(cell.id)
        assert cell.config["logging"].get("wandb_group") is None  # the expanded cell itself is untouched


def test_a_group_set_by_the_spec_is_kept(tmp_path):
    (cell, _) = _cells({"wandb_group": "ablation-3"})
    d = C.materialise(cell, tmp_path, "my-sweep", command="true")
    assert yaml.safe_load((d / "config.yaml").read_text())["logging"]["wandb_group"] == "ablation-3"


def test_the_cell_run_logs_into_the_group(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    (cell, _) = _cells({"wandb": True, "wandb_mode": "offline"})
    d = C.materialise(cell, tmp_path, "my-sweep")
    run(load_config(d / "config.yaml"), d, quiet=True)  # what the sweep job does (harness/sweeps/job.py)
    (wb,) = wandb_runs(d)
    assert wb["group"] == "my-sweep" and wb["id"].startswith(cell.id + "-")
