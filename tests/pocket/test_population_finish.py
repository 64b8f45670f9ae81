"""A population member ends as its separate run does: both go through ``runner.finish`` (result.json, the
after-training stage, the status and its log lines), so a change to a run's end reaches both."""

import json

import pytest

from harness.backends.pocket.population_runner import run_population
from harness.backends.pocket.trainer import PocketTrainer
from harness.run import runner
from harness.run.config import load_config

TIMES = {"wall_time_s", "provenance", "timing", "population"}  # when and where it ran; a population's own note


@pytest.fixture
def configs(tiny):
    tiny["train"].update(steps=1, checkpoint_every=0)
    tiny["eval"]["every"] = 0
    return [load_config({**tiny, "seed": seed}) for seed in (0, 1)]


def _result(run_dir) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_a_member_without_enough_updates_ends_as_its_separate_run(configs, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "count_updates", lambda run_dir, expected: {"made": 0, "expected": int(expected)})
    alone = runner.run(configs[0], tmp_path / "alone", quiet=True)
    members = run_population(configs, [tmp_path / "m0", tmp_path / "m1"], quiet=True)
    assert [r["status"] for r in (alone, *members)] == ["insufficient_updates"] * 3
    assert members[0] == _result(tmp_path / "m0")
    assert sorted(set(alone) - TIMES) == sorted(set(members[0]) - TIMES)
    for d in ("alone", "m0", "m1"):
        log = (tmp_path / d / "train.log").read_text()
        assert "warning: only 0 of 1 steps updated the policy" in log, d


def test_a_failed_member_is_recorded_as_its_separate_run(configs, tmp_path, monkeypatch):
    def finish(self, *args, **kwargs):
        raise RuntimeError(f"boom in seed {self.cfg.seed}")

    monkeypatch.setattr(PocketTrainer, "finish", finish)
    with pytest.raises(RuntimeError, match="boom in seed 1"):
        runner.run(configs[1], tmp_path / "alone", quiet=True)
    members = run_population(configs, [tmp_path / "m0", tmp_path / "m1"], quiet=True)
    assert [str(e) for e in members] == ["boom in seed 0", "boom in seed 1"]
    alone, member = _result(tmp_path / "alone"), _result(tmp_path / "m1")
    assert {k: v for k, v in alone.items() if k not in TIMES | {"traceback"}} == {
        k: v for k, v in member.items() if k not in TIMES | {"traceback"}
    }
    assert alone["status"] == "failed" and alone["error"] == "RuntimeError: boom in seed 1"
    for r in (alone, member):
        assert r["traceback"].endswith("RuntimeError: boom in seed 1\n") and "in finish" in r["traceback"]
    assert "failed: RuntimeError: boom in seed 1" in (tmp_path / "m1" / "train.log").read_text()
