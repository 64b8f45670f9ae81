"""The README's "add your own method in one file" example registers itself and runs through the contract."""

import importlib.util
import math
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
    with pytest.raises(harness.HyperparameterError, match="cap=0.5"):
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
