"""adaptive_entropy on pocket: the controller's state (coefficient c, gate e) survives a SIGTERM + resume
bit-identically, and a resume that lost it diverges (so the comparison can fail)."""

import os
import signal

import pytest
import torch

from harness.backends.pocket.trainer import PocketTrainer
from harness.io import read_jsonl
from harness.run.config import load_config
from harness.run.runner import run

STEPS, STOP_AFTER = 6, 4  # step 5 then runs with the gate open and c = 0.006 (read from the checkpoint)
CKPT = "checkpoints/latest.pt"


@pytest.fixture
def cfg(tiny):
    """The shared tiny run (16 responses/step on the 0.3M model, no warm start), 6 steps, adaptive_entropy."""
    # The untrained model's rollout entropy (-mean old log-prob) is ~4.02-4.08 nats on these 6 steps, so target
    # 4.05 opens and closes the gate and moves c (target 0.5 would leave the gate shut and c at 0: no state).
    tiny["method"] = {"name": "adaptive_entropy", "target": 4.05, "delta": 2e-3, "coef_max": 0.01}
    tiny["train"].update(steps=STEPS, checkpoint_every=0)  # a checkpoint only at the end or on SIGTERM
    tiny["eval"]["every"] = 0
    return tiny


def _strip(rows):  # wall-clock timings and the process's peak RSS differ between runs; the rest must match exactly
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "mem/"))} for r in rows]


def _sigterm_after(monkeypatch, stop_step):
    """Deliver a real SIGTERM to this process once step ``stop_step`` has trained (before its row is logged)."""
    real = PocketTrainer.train_step

    def step(self, k):
        out = real(self, k)
        if k == stop_step:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(PocketTrainer, "train_step", step)
    return real


def _interrupt(cfg, tmp_path, name, monkeypatch):
    real = _sigterm_after(monkeypatch, STOP_AFTER)
    with pytest.raises(KeyboardInterrupt):
        run(load_config(cfg), tmp_path / name, quiet=True)
    monkeypatch.setattr(PocketTrainer, "train_step", real)
    assert not (tmp_path / name / "result.json").exists()
    return torch.load(tmp_path / name / CKPT, weights_only=False)


def test_adaptive_entropy_state_survives_sigterm_resume(cfg, tmp_path, monkeypatch):
    ref = run(load_config(cfg), tmp_path / "ref", quiet=True)
    ref_rows = read_jsonl(tmp_path / "ref" / "metrics.jsonl")
    coefs = [r["adaptive_entropy/coef"] for r in ref_rows]
    gates = [r["adaptive_entropy/enabled"] for r in ref_rows]
    assert max(coefs) > 0 and set(gates) == {0.0, 1.0}, (coefs, gates)  # the state moves: the test can fail

    blob = _interrupt(cfg, tmp_path, "resumed", monkeypatch)
    assert blob["step"] == STOP_AFTER and len(read_jsonl(tmp_path / "resumed" / "metrics.jsonl")) == STOP_AFTER
    st = blob["method_state"]
    assert st["updates"] == STOP_AFTER
    # the checkpoint holds what step 6 will use: c and e after step 5's update, = step 6's logged values
    assert (st["coef"], float(st["enabled"])) == (coefs[STOP_AFTER], gates[STOP_AFTER])

    res = run(load_config(cfg), tmp_path / "resumed", quiet=True)
    assert "resumed from" in (tmp_path / "resumed" / "train.log").read_text()
    assert res["status"] == "completed" and res["summary"] == ref["summary"]
    assert _strip(read_jsonl(tmp_path / "resumed" / "metrics.jsonl")) == _strip(ref_rows)
    a = torch.load(tmp_path / "resumed" / CKPT, weights_only=False)
    b = torch.load(tmp_path / "ref" / CKPT, weights_only=False)
    assert a["method_state"] == b["method_state"]
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])

    # control: the same interrupt, but the checkpoint's controller state reset to the start -> the rest differs
    lost = _interrupt(cfg, tmp_path, "lost", monkeypatch)
    lost["method_state"] = {"coef": 0.0, "enabled": 1, "last_measured": None, "updates": 0}
    torch.save(lost, tmp_path / "lost" / CKPT)
    run(load_config(cfg), tmp_path / "lost", quiet=True)
    assert _strip(read_jsonl(tmp_path / "lost" / "metrics.jsonl"))[-1] != _strip(ref_rows)[-1]
    c = torch.load(tmp_path / "lost" / CKPT, weights_only=False)["model"]
    assert not all(torch.equal(c[k], b["model"][k]) for k in c)
