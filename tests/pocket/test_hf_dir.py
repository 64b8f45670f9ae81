"""A local Hugging Face model directory (saved here with save_pretrained) + a JSONL problem file."""

import json

import pytest

from harness.io import read_jsonl
from harness.run.config import ConfigError, load_config
from harness.run.runner import run
from tests.helpers.tiny_hf import save_tiny_qwen


@pytest.fixture
def hf_dir(tmp_path):
    return save_tiny_qwen(tmp_path / "tiny-hf")


def test_hf_directory_and_jsonl_task(hf_dir, tmp_path, tiny):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a in range(6) for b in range(6))
    )
    tiny["model"] = {"name": str(hf_dir)}
    tiny["task"] = {"name": str(problems), "test_size": 6}
    tiny["train"].update(steps=2)
    res = run(load_config(tiny), tmp_path / "run", quiet=True)
    assert res["status"] == "completed" and res["model"] == str(hf_dir)
    assert res["task"] == "problems" and res["warm_start"] is None  # a checkpoint is its own base model
    assert 10_000 < res["model_params"] < 100_000
    assert res["eval"]["suites"]["problems"]["n_problems"] == 6
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 2


def test_bad_model_directories(tmp_path, tiny, hf_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="directory without config.json"):
        load_config(tiny, [f"model.name={tmp_path / 'empty'}"])
    tiny["model"] = {"name": str(hf_dir), "warm_start": {"enabled": "true"}}
    with pytest.raises(ConfigError, match="model.warm_start.enabled: true only applies to pocket sizes"):
        load_config(tiny)
