"""A reduced CPU rehearsal (docs/gpu.md "The CPU rehearsal"): one cell of sweeps/rehearsal.yaml, 2 steps, through
OpenRLHF 0.11.2's real loop (Ray, PPOTrainer.fit, SamplesGenerator, RolloutRayActor with the CPU engine, our reward,
PolicyModelActor with a real DeepSpeed engine), killed with all its processes after step 1's checkpoint and resumed
through upstream's --ckpt.load_enable, then the after-training stage. Minutes on a CPU (each launch starts Ray and
four Python workers)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.openrlhf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The rehearsal's inputs, built as scripts/ci_rehearsal.sh builds them (harness data prepare + the model)."""
    out = tmp_path_factory.mktemp("rehearsal_assets")
    subprocess.run(
        [sys.executable, "-m", "harness", "data", "prepare", "dapo-math-17k", "--source", "sample", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    from harness.backends.openrlhf.rehearsal.assets import build

    build(out / "dapo-math-17k.jsonl", out, log=lambda *_: None)
    return out


def cell_config(assets: Path, method: dict) -> dict:
    base = yaml.safe_load((ROOT / "sweeps" / "rehearsal.yaml").read_text())["base"]
    base["model"]["name"] = str(assets / "model")
    base["task"]["name"] = str(assets / "dapo-math-17k.jsonl")
    base["method"] = method
    base["train"].update(steps=2, checkpoint_every=1)
    base["eval"].update(every=1, suites=["aime24", "math500"])
    base["openrlhf"].update(keep_checkpoints=1, keep_hf_checkpoints=1)  # two saves: each rotates the one before
    base["logging"] = {"progress": False}
    return base


def test_rehearsal_cell_trains_evaluates_resumes_and_scores(tmp_path, assets):
    from harness.backends.openrlhf.rehearsal.check import check_cell, kill_after_step
    from harness.run.config import load_config

    cfg_path = tmp_path / "cell.yaml"
    cfg_path.write_text(yaml.safe_dump(cell_config(assets, {"name": "kl_cov", "k_ratio": 0.002})))
    run_dir = tmp_path / "run"
    train = [sys.executable, "-m", "harness", "train", str(cfg_path), "--run-dir", str(run_dir)]
    killed = kill_after_step(train, run_dir, 1, tmp_path / "killed.log")  # no process of its group survives
    assert killed["killed_at_checkpoint_step"] == 1 and killed["logged_steps_before_kill"] == [1]
    assert not (run_dir / "checkpoints" / "final").exists()

    subprocess.run(train, check=True, capture_output=True, timeout=1200)  # resumes from global_step1
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["updates"] == {"made": 2, "expected": 2}
    summary = check_cell(run_dir, load_config(cfg_path), resumed_from=1)  # the run dir contract, the resume
    assert summary["steps_trained_after_resume"] == [2]
    # the HF copy of step 1 deleted once step 2's was written (check_retention: retention.jsonl and the disk)
    assert summary["checkpoints"] == {
        "saves": [1, 2],
        "peak_hf": 2,
        "hf": ["global_step2_hf"],
        "deepspeed": ["global_step2"],
    }
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "entropy/delta" in rows[1]  # continued across the kill
    assert rows[1]["selected/count"] >= 1  # KL-Cov selected tokens inside upstream's training step
    step2 = json.loads((run_dir / "eval" / "step_2.json").read_text())
    assert set(step2["suites"]) == {"aime24", "math500"}
    assert step2["suites"]["aime24"]["n_problems"] == 3 and step2["suites"]["math500"]["n_problems"] == 3
    assert "eval/aime24/avg@4" in rows[1]
    final = result["eval"]["suites"]
    assert {s: final[s]["stage"] for s in final} == {"aime24": "after_training", "math500": "after_training"}
    assert all(0.0 <= final[s]["metrics"]["avg@4"] <= 1.0 for s in final)
    assert (run_dir / "checkpoints" / "final" / "model.safetensors").is_file()


def test_rehearsal_refuses_a_machine_with_cuda(monkeypatch):
    """The stand-ins never replace real engines: with CUDA visible, installing them is an error."""
    import torch

    from harness.backends.openrlhf.rehearsal import cpu as cpu_rehearsal

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    with pytest.raises(cpu_rehearsal.RehearsalOnGPUError, match="this machine has CUDA"):
        cpu_rehearsal.install()
