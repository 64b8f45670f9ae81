"""The README's "add your own method in one file" example registers itself and runs through the contract; a method
class that registered no name trains when a config names it ``module:Class``."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "capped_pg.py"


@pytest.fixture
def capped_pg():
    spec = importlib.util.spec_from_file_location("user_capped_pg", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    harness.METHODS.unregister("capped_pg")


def test_example_registers_and_caps_the_importance_weight(capped_pg):
    assert "capped_pg" in harness.list_methods()
    m = harness.get_method("capped_pg", cap=2.0)
    assert "eps_low" not in m.to_config()  # a MethodBase: no clip options
    lp = torch.tensor([[math.log(0.5), math.log(0.5)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5), math.log(0.1)]])  # ratios 1 and 5
    out = m.policy_loss(lp, old, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2))
    # token 0: -1 * 1; token 1: the weight 5 is capped at 2: -2; token mean -1.5
    assert out.loss.item() == pytest.approx(-1.5)
    out.loss.backward()
    # d/d lp of -w A / 2: token 0 -ratio/2 = -0.5; token 1 the capped weight 2 * ratio/ratio keeps slope 2: -1
    assert lp.grad[0].tolist() == pytest.approx([-0.5, -1.0])
    assert out.metrics["clipfrac"] == pytest.approx(0.5)
    with pytest.raises(harness.HyperparameterError, match=r"capped_pg.cap: 0.5 must be >= 1.0"):
        harness.get_method("capped_pg", cap=0.5)


def test_duplicate_name_is_an_error(capped_pg):
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        harness.register_method("grpo")(type("Other", (harness.Method,), {}))


def test_readme_shows_the_example_verbatim():
    readme = (EXAMPLE.parents[2] / "README.md").read_text()
    assert EXAMPLE.read_text().split('"""', 2)[2].strip() in readme


def test_the_example_trains_from_a_config(capped_pg, tiny, tmp_path):
    """The README's "train it" step: a config naming the method (here 2 steps of the tiny pocket run) trains it."""
    from harness.run.runner import run

    tiny["method"] = {"name": "capped_pg", "cap": 1.5}
    tiny["train"]["steps"] = 2
    result = run(tiny, tmp_path / "run", quiet=True)
    assert result["status"] == "completed" and result["updates"] == {"made": 2, "expected": 2}
    assert result["method"] == "capped_pg" and result["method_config"]["cap"] == 1.5
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2


def test_the_example_loads_without_torch():
    """Saved under methods/, the example is imported by every method lookup (`harness methods`, config checks):
    it must not import torch there, or every such command pays torch's import (tests/foundation/test_cli_startup.py).
    """
    probe = f"import runpy, sys\nrunpy.run_path({str(EXAMPLE)!r})\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


HALF_CLIP = """
from harness import Method, TokenLoss


class HalfClip(Method):
    \"\"\"The PPO clip at half weight: a method class its module never registers.\"\"\"

    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **kw):
        out = super().per_token_loss(log_probs, old_log_probs, advantages, mask, **kw)
        return TokenLoss(0.5 * out.loss, clipped=out.clipped, log_ratio=out.log_ratio)
"""


@pytest.fixture
def half_clip(tmp_path, monkeypatch):
    (tmp_path / "user_half_clip.py").write_text(HALF_CLIP)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_half_clip:HalfClip"
    harness.METHODS.unregister("user_half_clip:HalfClip")
    sys.modules.pop("user_half_clip", None)


def test_an_unregistered_method_class_named_module_colon_class_trains(tiny, tmp_path, half_clip):
    """Issue 36 item 7: `method: {name: "pkg.mod:Class"}` used to be refused ("... was imported but HalfClip is not
    a registered method"); the class is registered on lookup under the reference, which names it everywhere."""
    from harness.run.config import load_config
    from harness.run.runner import run

    tiny["train"]["steps"] = 2
    cfg = load_config({**tiny, "method": {"name": half_clip, "eps_high": 0.28}})
    assert harness.get_method(half_clip).name == half_clip
    assert cfg.method == {**load_config({**tiny, "method": {"name": "clip_higher"}}).method, "name": half_clip}
    assert cfg.run_id() != load_config({**tiny, "method": {"name": "clip_higher"}}).run_id()  # the name is in it
    run(cfg, tmp_path / "rd", quiet=True)
    result = json.loads((tmp_path / "rd" / "result.json").read_text())
    assert result["status"] == "completed" and result["method"] == half_clip and result["run_id"] == cfg.run_id()
    rows = [json.loads(x) for x in (tmp_path / "rd" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    with pytest.raises(harness.HyperparameterError, match="user_half_clip:HalfClip.eps_high: -1 must be >= 0.0"):
        harness.get_method(half_clip, eps_high=-1)
