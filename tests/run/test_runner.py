"""Run directories and the `harness train` command: refusal of a different config, --force, bad input."""

import json

import pytest
import yaml

from harness.cli import main
from harness.run.config import load_config
from harness.run.runner import run


@pytest.fixture
def cfg_file(tiny, tmp_path):
    tiny["train"].update(steps=2, checkpoint_every=0)
    tiny["eval"]["every"] = 0
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(tiny))
    return p


def test_different_config_is_refused_unless_force(cfg_file, tmp_path, capsys):
    rd = tmp_path / "rd"
    assert main(["train", str(cfg_file), "--run-dir", str(rd)]) == 0
    first = (rd / "metrics.jsonl").read_text()
    assert json.loads(capsys.readouterr().out)["status"] == "completed"

    assert main(["train", str(cfg_file), "train.steps=3", "--run-dir", str(rd)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run directory") and "holds a different config" in err
    assert "train.steps: 2 -> 3" in err and "--force" in err
    assert (rd / "metrics.jsonl").read_text() == first  # nothing written was touched

    assert main(["train", str(cfg_file), "train.steps=3", "--run-dir", str(rd), "--force"]) == 0
    moved = list((rd / "replaced").iterdir())
    assert len(moved) == 1 and (moved[0] / "metrics.jsonl").read_text() == first  # kept, not deleted
    assert len((rd / "metrics.jsonl").read_text().splitlines()) == 3


def test_completed_run_is_not_trained_again(cfg_file, tmp_path):
    rd = tmp_path / "rd"
    res = run(load_config(cfg_file), rd, quiet=True)
    stamp = (rd / "result.json").stat().st_mtime_ns
    again = run(load_config(cfg_file), rd, quiet=True)
    assert again == res and (rd / "result.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.stpes=3", "error: train.stpes: unknown key. Did you mean 'steps'"),
        ("model.name=pocket-3m", "error: model.name: unknown model 'pocket-3m'."),
        ("task.name=aritm", "error: task.name: unknown task 'aritm'. Did you mean 'arith' or 'gsm_arith'?"),
        ("method.name=grop", "error: method: unknown method 'grop'."),
    ],
)
def test_bad_input_fails_before_any_work(cfg_file, tmp_path, capsys, override, fragment):
    rd = tmp_path / "never"
    assert main(["train", str(cfg_file), override, "--run-dir", str(rd)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(fragment), err
    assert len(err.strip().splitlines()) == 1
    assert not rd.exists()


def test_missing_config_and_dry_run(cfg_file, tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.yaml")]) == 2
    assert "run config not found" in capsys.readouterr().err
    assert main(["train", str(cfg_file), "--dry-run", "--run-dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "backend: pocket" in out and "# run id" in out and not (tmp_path / "d").exists()
