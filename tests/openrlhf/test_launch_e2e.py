"""The whole launch path on CPU up to OpenRLHF's own validation: harness.run.runner.run -> our backend -> subprocess
``python -m harness.backends.openrlhf.launch`` -> Ray with our hook -> upstream ``train_ppo_ray`` as __main__.

A full run needs GPUs (vLLM, GPU placement groups), so the config carries one extra flag that upstream's
validation rejects (``--train.partial_rollout_enable`` without async): the run must fail *in upstream's code*,
after Ray started, and leave a failed result.json, the log, and no Ray processes behind.
"""

import json
import sys

import pytest

pytestmark = pytest.mark.openrlhf


def test_run_reaches_upstream_validation_and_fails_cleanly(tmp_path, tiny_model_dir):
    from harness.run.runner import run

    cfg = {
        "backend": "openrlhf",
        "seed": 0,
        "method": {"name": "kl_cov", "scope": "global"},
        "model": {"name": tiny_model_dir},
        "task": {"name": str(tmp_path / "data.jsonl")},
        "train": {
            "steps": 2,
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "updates_per_rollout": 1,
            "micro_batch_size": 1,
            "max_new_tokens": 8,
        },
        "openrlhf": {
            "nodes": 1,
            "gpus_per_node": 1,
            "python": sys.executable,
            "env": {"RAY_USAGE_STATS_ENABLED": "0"},
            "extra_flags": {"--train.partial_rollout_enable": True},
        },
    }
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="OpenRLHF run failed"):
        run(cfg, run_dir, quiet=True)
    out = (run_dir / "openrlhf.log").read_text()
    assert "partial_rollout_enable requires --train.async_enable" in out  # upstream's own assertion
    assert "Started a local Ray instance" in out  # our launcher started Ray (with the hook) first
    assert "openrlhf/cli/train_ppo_ray.py" in out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed" and "OpenRLHF run failed" in result["error"]
    assert (run_dir / "config.yaml").exists()
