"""A run directory's config.yaml, written whole by the harness, is refused or warned about when cut short."""

import pytest
import yaml

from harness.run.config import WRITTEN_ORDER, WRITTEN_SECTIONS, ConfigError, load_config, load_stored_config


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
    with pytest.raises(ConfigError, match=r"config.yaml: no eval, logging sections; .* cut short"):
        load_stored_config(tmp_path)
