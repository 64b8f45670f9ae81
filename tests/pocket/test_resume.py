"""Resume equivalence: an interrupted run (Ctrl-C, or a crash) resumes and ends with the same metrics."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from harness.io import read_jsonl
from harness.run.config import load_config
from harness.run.runner import run

ROOT = Path(__file__).resolve().parents[2]


def _strip(rows):  # wall-clock timings differ between runs; everything else must match exactly
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _learning_cfg(tiny, steps):
    # entropy bonus: non-zero gradients even from a random (not warm-started) model, so weights and Adam
    # state really change every step and a resume that lost either would diverge
    tiny["method"] = {"name": "entropy_bonus", "coef": 0.05}
    tiny["train"].update(steps=steps, checkpoint_every=1)
    tiny["eval"]["every"] = 0
    return tiny


def test_ctrl_c_checkpoints_and_resume_matches_uninterrupted(tiny, tmp_path):
    cfg = _learning_cfg(tiny, steps=25)
    ref = run(load_config(cfg), tmp_path / "ref", quiet=True)
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "harness", "train", str(cfg_path), "--run-dir", str(run_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(read_jsonl(run_dir / "metrics.jsonl")) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "checkpoint saved" in err and "interrupted" in err
    assert not (run_dir / "result.json").exists()
    done = len(read_jsonl(run_dir / "metrics.jsonl"))
    assert 3 <= done < 25
    assert torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)["step"] == done
    res = run(load_config(cfg), run_dir, quiet=True)  # resumes
    assert "resumed from" in (run_dir / "train.log").read_text()
    assert res["status"] == "completed" and res["summary"] == ref["summary"]
    assert _strip(read_jsonl(run_dir / "metrics.jsonl")) == _strip(read_jsonl(tmp_path / "ref" / "metrics.jsonl"))
    a = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "ref" / "checkpoints" / "latest.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["entropy_bonus", "prime"])
def test_crash_resumes_from_last_checkpoint_and_replays_later_steps(tiny, tmp_path, monkeypatch, method):
    from harness.backends.pocket.trainer import PocketTrainer

    cfg = _learning_cfg(tiny, steps=6)
    cfg["train"]["checkpoint_every"] = 2
    if method == "prime":  # PRM, its optimizer and the frozen reference must all come back from the checkpoint
        cfg["method"] = {"name": "prime", "prm_lr": 1e-3}
        cfg["model"] = {
            "name": "pocket-0.3m",
            "cache_dir": str(tmp_path / "cache"),
            "warm_start": {"max_steps": 20, "min_steps": 20, "check_every": 20, "batch_size": 16},
        }
    ref = run(load_config(cfg), tmp_path / "ref", quiet=True)

    real = PocketTrainer.train_step

    def crash_at_6(self, step):
        if step == 6:
            raise RuntimeError("simulated crash")
        return real(self, step)

    monkeypatch.setattr(PocketTrainer, "train_step", crash_at_6)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(load_config(cfg), tmp_path / "crashed", quiet=True)
    failed = (tmp_path / "crashed" / "result.json").read_text()
    assert '"status": "failed"' in failed and "simulated crash" in failed
    assert len(read_jsonl(tmp_path / "crashed" / "metrics.jsonl")) == 5  # step 5 logged after the step-4 checkpoint
    monkeypatch.setattr(PocketTrainer, "train_step", real)
    res = run(load_config(cfg), tmp_path / "crashed", quiet=True)
    assert res["status"] == "completed"
    assert list((tmp_path / "crashed").glob("result.failed-*.json"))  # the failed attempt is kept aside
    assert _strip(read_jsonl(tmp_path / "crashed" / "metrics.jsonl")) == _strip(
        read_jsonl(tmp_path / "ref" / "metrics.jsonl")
    )
    assert res["summary"] == ref["summary"]
