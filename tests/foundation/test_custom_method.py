"""The README's "add your own method in one file" example registers itself and runs through the contract."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

import harness

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "dual_clip.py"


@pytest.fixture
def dual_clip():
    spec = importlib.util.spec_from_file_location("user_dual_clip", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    harness.METHODS.unregister("dual_clip")


def test_example_registers_and_caps_negative_advantage_loss(dual_clip):
    assert "dual_clip" in harness.list_methods()
    m = harness.get_method("dual_clip", clip_c=3.0)
    lp = torch.tensor([[math.log(5.0), 0.0]], requires_grad=True)  # ratio 5 and 1
    out = m.policy_loss(lp, torch.zeros(1, 2), torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2))
    # token 0: max(5, 1.2) = 5, capped at -A c = 3 (no gradient); token 1: -1
    assert out.loss.item() == pytest.approx((3.0 - 1.0) / 2)
    out.loss.backward()
    assert lp.grad[0, 0] == 0
    with pytest.raises(harness.HyperparameterError, match="clip_c=1.0 must be > 1.0"):
        harness.get_method("dual_clip", clip_c=1.0)


def test_duplicate_name_is_an_error(dual_clip):
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        harness.register_method("grpo")(type("Other", (harness.Method,), {}))


def test_readme_shows_the_example_verbatim():
    readme = (EXAMPLE.parents[2] / "README.md").read_text()
    assert EXAMPLE.read_text().split('"""', 2)[2].strip() in readme
