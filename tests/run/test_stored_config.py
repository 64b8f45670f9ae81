"""A run directory's config.yaml, written whole by the harness, is refused or warned about when cut short."""

import json

import pytest
import yaml

from harness.run.config import WRITTEN_ORDER, WRITTEN_SECTIONS, ConfigError, load_config
from harness.run.identity import config_drift, load_stored_config


def test_written_order_is_the_order_to_yaml_writes():
    written = list(yaml.safe_load(load_config({}).to_yaml()))
    assert written[: len(WRITTEN_ORDER)] == WRITTEN_ORDER
    assert set(WRITTEN_SECTIONS) <= set(written)


def test_a_cut_config_is_refused_naming_the_file_and_the_gap(tmp_path):
    cfg = load_config({})
    text = cfg.to_yaml()
    (tmp_path / "config.yaml").write_text(text)
    assert load_stored_config(tmp_path).run_id() == cfg.run_id()
    (tmp_path / "config.yaml").write_text(text[: text.index("\neval:")])
    with pytest.raises(ConfigError, match=r"config.yaml: no eval, logging sections \(the harness writes"):
        load_stored_config(tmp_path)


def _recorded(tmp_path, cfg, text):
    """A run directory whose result.json records ``cfg``'s run and whose config.yaml holds ``text``."""
    (tmp_path / "result.json").write_text(json.dumps({"run_id": cfg.run_id(), "status": "completed"}))
    (tmp_path / "config.yaml").write_text(text)


def test_a_config_that_is_not_its_runs_is_refused_naming_the_edited_key(tmp_path):
    """One reader for a run's own config: besides a cut file, one edited after the run (export builds from it)."""
    cfg = load_config({"train": {"lr": 0.0005}})
    _recorded(tmp_path, cfg, cfg.to_yaml())
    assert load_stored_config(tmp_path).run_id() == cfg.run_id()
    edited = load_config({"train": {"lr": 0.001}})
    _recorded(tmp_path, cfg, edited.to_yaml())
    with pytest.raises(ConfigError) as e:
        load_stored_config(tmp_path)
    assert str(e.value) == (
        f"{tmp_path}: its config.yaml is not the config of the run it holds: result.json records run {cfg.run_id()}, "
        f"config.yaml gives run {edited.run_id()} (edited after the run started; which keys changed is not recorded "
        "in result.json); restore its config.yaml to use this run"
    )


def test_the_drift_of_a_cut_config_names_its_missing_sections_not_the_defaults(tmp_path):
    """A cut config.yaml of a recorded run is named as cut (train and the readers), not as keys edited to defaults."""
    cfg = load_config({"eval": {"every": 3}})
    text = cfg.to_yaml()
    cut = yaml.safe_load(text[: text.index("\neval:")])
    _recorded(tmp_path, cfg, text)
    rid, why = config_drift(tmp_path, cut)
    assert rid == cfg.run_id()
    assert why.endswith(
        f"config.yaml gives run {load_config(cut).run_id()}: no eval, logging sections (the harness writes them all: "
        "cut short or edited by hand)"
    )
