"""Configs that used to load silently and run something else than the user wrote (issue 37 items 6 and 8a-8c), met
the way a user meets them: ``harness train CFG ... --dry-run`` stops with one ``error:`` line (exit 2) naming the key
or file and what is allowed, and writes nothing."""

import pytest
import yaml

from harness.cli import main
from tests.helpers.sweep_targets import tiny_pocket_base


def cfg_file(tmp_path, text: str | None = None):
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(tiny_pocket_base(steps=2)) if text is None else text)
    return p


def refused(tmp_path, capsys, cfg, *overrides) -> str:
    assert main(["train", str(cfg), *overrides, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert not (tmp_path / "runs").exists()
    return err


@pytest.mark.parametrize(
    "override, key",
    [("openrlhf.bogus_key=1", "openrlhf.bogus_key"), ("openrlhf.nodes=2", "openrlhf.nodes")],
)
def test_a_key_of_another_backend_is_refused(tmp_path, capsys, override, key):
    """Item 6: on a pocket run ``openrlhf.bogus_key=1`` loaded and changed the run id; a valid OpenRLHF key too."""
    err = refused(tmp_path, capsys, cfg_file(tmp_path), override)
    assert err == (
        f"error: {key}: openrlhf belongs to the openrlhf backend, and this run's backend is pocket; remove it "
        f"(or set backend: openrlhf)"
    )


@pytest.mark.parametrize("text", ["", "# a config I have not written yet\n", "---\n"])
def test_an_empty_config_file_is_refused(tmp_path, capsys, text):
    """Item 8a: an empty (or comment-only) file trained the all-defaults run; ``{}`` still says so on purpose."""
    cfg = cfg_file(tmp_path, text)
    err = refused(tmp_path, capsys, cfg)
    hint = "write {} for a run config of all defaults"
    assert err == f"error: {cfg}: the file is empty (no keys, or only comments); {hint}"
    cfg.write_text("{}\n")
    assert main(["train", str(cfg), "--dry-run"]) == 0


@pytest.mark.parametrize("override", ["train.lr=0", "train.lr=0.0", "train.lr=0e0"])
def test_a_learning_rate_of_zero_is_refused(tmp_path, capsys, override):
    """Item 8b: ``train.lr: 0`` trained a run that cannot learn. No run config evaluates without training
    (train.steps >= 1; `harness eval` scores a model), so lr 0 is refused everywhere."""
    err = refused(tmp_path, capsys, cfg_file(tmp_path), override)
    value = override.partition("=")[2]
    shown = {"0": "0", "0.0": "0.0", "0e0": "0.0"}[value]
    why = "at lr 0 the run cannot learn (`harness eval` scores a model)"
    assert err == f"error: train.lr: {shown} must be > 0.0; {why}"


def test_scientific_notation_reads_as_the_number_in_every_field(tmp_path, capsys):
    """Item 8c: YAML 1.1 reads 2e-3 and 1e9 as strings: a method hyperparameter refused them ("k_ratio='2e-3' must be
    float (got str)") while train.lr took them; now a file and an override read them as numbers for every field, an
    integer field takes an integral one and refuses another."""
    base = tiny_pocket_base(steps=2)
    base.pop("method")
    text = yaml.safe_dump(base).replace("  steps: 2\n", "  steps: 2e0\n")
    text += "method: {name: kl_cov, k_ratio: 2e-3, advantage: prime, advantage_options: {beta: 1e-2}}\n"
    cfg = cfg_file(tmp_path, text)
    assert main(["train", str(cfg), "train.lr=5e-4", "model.warm_start.lr=3e-3", "--dry-run"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out.split("\n# run id", 1)[0])
    assert shown["method"]["k_ratio"] == 0.002 and shown["method"]["advantage_options"] == {"beta": 0.01}
    assert shown["train"]["steps"] == 2 and shown["train"]["lr"] == 0.0005
    assert shown["model"]["warm_start"]["lr"] == 0.003
    assert main(["train", str(cfg), "train.steps=1e9", "--dry-run"]) == 0
    assert yaml.safe_load(capsys.readouterr().out.split("\n# run id", 1)[0])["train"]["steps"] == 1_000_000_000
    err = refused(tmp_path, capsys, cfg, "train.steps=2.5e0")
    assert err == "error: train.steps: expected an integer, got 2.5"
