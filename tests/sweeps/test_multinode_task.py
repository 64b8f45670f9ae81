"""A non-head task of a multi-node job lends its node through the backend and leaves the run directory alone."""

import yaml

from harness.backends import BACKENDS
from harness.sweeps.job import train_cell


class Recorder:
    calls = []

    def train(self, config, run_dir, log=None):
        Recorder.calls.append((config.backend, str(run_dir)))
        return {}


def test_worker_task_skips_the_runner(tmp_path, monkeypatch):
    BACKENDS.register("test_recorder", Recorder())
    try:
        cfg = {
            "backend": "test_recorder",
            "method": {"name": "grpo"},
            "model": {"name": "Qwen/Qwen2.5-7B"},
            "task": {"name": "data.jsonl"},
        }
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
        monkeypatch.setenv("SLURM_NNODES", "2")
        monkeypatch.setenv("SLURM_PROCID", "1")
        assert train_cell(tmp_path) == {"status": "worker"}
        assert Recorder.calls == [("test_recorder", str(tmp_path))]
        # the runner did not touch the directory: no rewritten config, no result, no train.log
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
        assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == cfg
    finally:
        BACKENDS.unregister("test_recorder")
