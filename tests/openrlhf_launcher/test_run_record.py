"""OpenRLHF under the runner: the launch writes no result.json; the backend returns the run's record and the
runner writes result.json once (it used to be written by the launch, read back and rewritten)."""

import json
import subprocess

from harness.run.records import RunResult
from harness.run.runner import run


def test_runner_writes_the_openrlhf_result_once(tmp_path, monkeypatch):
    from harness.backends.openrlhf import bridge, launch, runner

    monkeypatch.setattr(runner, "require_openrlhf", lambda: None)
    monkeypatch.delenv("SLURM_NNODES", raising=False)
    run_dir = tmp_path / "run"
    envs, records = [], []

    real_run = subprocess.run

    def fake_launch(cmd, env=None, stdout=None, stderr=None, **kw):  # what the launcher leaves: metrics and an eval
        if "harness.backends.openrlhf.launch" not in cmd:  # anything else (provenance's git) runs for real
            return real_run(cmd, env=env, stdout=stdout, stderr=stderr, **kw)
        envs.append(env)
        for step in range(1, 16):
            bridge.append_metrics(run_dir, {"step": step, "entropy": 1.0 - step / 20, "reward/mean": step / 10})
        spec = {"n_samples": 2, "temperature": 0.6, "top_p": 1.0, "max_tokens": 64, "counts": {"math": 5}}
        bridge.write_eval(run_dir, bridge.eval_payload({"eval_math_pass1": 0.4}, 15, spec))
        return subprocess.CompletedProcess(cmd, 0)

    real_train = runner.train

    def train(config, rd, log=None):
        records.append(real_train(config, rd, log=log))
        assert not (rd / "result.json").exists()
        return records[-1]

    monkeypatch.setattr(runner.subprocess, "run", fake_launch)
    monkeypatch.setattr(runner, "train", train)
    cfg = {
        "backend": "openrlhf",
        "method": {"name": "kl_cov"},
        "model": {"name": "Qwen/Qwen2.5-7B"},
        "task": {"name": "/data/dapo.jsonl"},
        "train": {"steps": 15, "micro_batch_size": 2},
        "logging": {"progress": False},
    }
    res = run(cfg, run_dir, quiet=True)
    assert envs[0][launch.RUNNER_ENV] == "1" and isinstance(records[0], RunResult)
    assert json.loads((run_dir / "result.json").read_text()) == res
    assert res["status"] == "completed" and res["backend"] == "openrlhf" and res["task"] == "dapo"
    assert res["steps"] == 15 and res["eval"]["suites"]["math"]["metrics"] == {"avg@2": 0.4}
    # 15 steps -> one step at each end, as on pocket: step 1 and step 15
    assert res["summary"]["entropy_start"] == 0.95 and res["summary"]["entropy_end"] == 0.25
    assert res["summary"]["reward_start"] == 0.1 and res["summary"]["reward_end"] == 1.5
