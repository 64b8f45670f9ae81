"""harness.run.lineage: a checkpoint's run, its length aside; the one check every backend refuses a foreign
checkpoint with (pocket's latest.pt and TRL's checkpoint folders alike)."""

from pathlib import Path

import pytest

from harness.backends.trl import checkpoints as trl_checkpoints
from harness.run.config import load_config
from harness.run.lineage import foreign_checkpoint, lineage


@pytest.fixture
def cfg(tiny):
    return load_config(tiny)


def test_the_lineage_ignores_the_length_only(cfg, tiny):
    longer = load_config({**tiny, "train": {**tiny["train"], "steps": 9}})
    other_seed = load_config({**tiny, "seed": 1})
    assert lineage(longer) == lineage(cfg) and longer.run_id() != cfg.run_id()
    assert lineage(other_seed) != lineage(cfg)


def test_a_foreign_checkpoint_is_named_with_its_owner_and_where_to_move_it(cfg, tiny):
    ckpt, run_dir = Path("r/checkpoints/latest.pt"), Path("r")
    assert foreign_checkpoint(cfg, lineage(cfg), "whoever", ckpt, run_dir) is None
    assert foreign_checkpoint(cfg, None, cfg.run_id(), ckpt, run_dir) is None  # from before lineages: by run id
    assert foreign_checkpoint(cfg, None, None, ckpt, run_dir) is None
    other = load_config({**tiny, "seed": 1})
    expected = (
        f"checkpoint r/checkpoints/latest.pt belongs to run {other.run_id()}, not to this run ({cfg.run_id()}); "
        "move it out of r or use another --run-dir"
    )
    assert foreign_checkpoint(cfg, lineage(other), other.run_id(), ckpt, run_dir) == expected
    assert foreign_checkpoint(cfg, None, other.run_id(), ckpt, run_dir) == expected


def test_trl_refuses_with_the_same_check(cfg, tiny):
    other = load_config({**tiny, "seed": 1})
    folder = Path("r/checkpoints/checkpoint-4")
    trl_checkpoints.check_lineage({"lineage": lineage(cfg), "run_id": "x"}, cfg, folder)
    with pytest.raises(ValueError, match=r"checkpoint r/checkpoints/checkpoint-4 belongs to run \w+, not to this run"):
        trl_checkpoints.check_lineage({"lineage": lineage(other), "run_id": other.run_id()}, cfg, folder)
