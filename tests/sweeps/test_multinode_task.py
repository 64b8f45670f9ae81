"""Each task of a multi-node job does what its backend's ``worker_role`` says: the head trains and owns the run
directory, a worker lends its node through ``train`` and leaves the directory alone, an idle task returns."""

import yaml

from harness.backends import BACKENDS, Backend, get_backend
from harness.run.config import load_config
from harness.sweeps.job import train_cell
from tests.helpers.sweep_targets import tiny_pocket_base


class Recorder(Backend):
    name = "test_recorder"
    calls = []

    def worker_role(self, config, env=None):
        return "worker"

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
        assert train_cell(tmp_path) == {"status": "worker"}
        assert Recorder.calls == [("test_recorder", str(tmp_path))]
        # the runner did not touch the directory: no rewritten config, no result, no train.log
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]
        assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == cfg
    finally:
        BACKENDS.unregister("test_recorder")


def test_pocket_cell_of_a_two_node_job_trains_on_task_0_and_task_1_idles(tmp_path, monkeypatch):
    """It used to raise ``TypeError: train() missing 1 required positional argument: 'run_dir'`` on task 1."""
    (tmp_path / "config.yaml").write_text(load_config(tiny_pocket_base(steps=1)).to_yaml())  # as a sweep writes it
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert train_cell(tmp_path) == {"status": "idle"}
    assert not (tmp_path / "result.json").exists()
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert train_cell(tmp_path)["status"] == "completed"
    assert (tmp_path / "result.json").is_file()


def test_openrlhf_worker_rule_reads_ray_address():
    """OpenRLHF: a non-head task joins the head's Ray cluster, unless Ray already runs there (RAY_ADDRESS)."""
    orl = get_backend("openrlhf")
    multi = {"SLURM_NNODES": "2", "SLURM_PROCID": "1"}
    assert orl.worker_role(None, multi) == "worker"
    assert orl.worker_role(None, {**multi, "RAY_ADDRESS": "10.0.0.1:6379"}) == "head"
    assert orl.worker_role(None, {"SLURM_NNODES": "2", "SLURM_PROCID": "0"}) == "head"
    assert get_backend("pocket").worker_role(None, multi) == "idle"
