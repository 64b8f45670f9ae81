"""entropy_from_logits: value and gradient against the plain log_softmax route, with chunks that do not divide V."""

import pytest
import torch

from harness.kernel.ops import entropy_from_logits


def reference_entropy(logits):
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_value_and_gradient_match_reference(chunk):
    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 100, dtype=torch.float64) * 4).requires_grad_()
    ours = entropy_from_logits(logits, chunk_size=chunk)
    ref = reference_entropy(logits)
    assert ours.shape == (3, 5)
    assert torch.allclose(ours, ref, atol=1e-12)
    w = torch.randn(3, 5, dtype=torch.float64)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), logits)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), logits)
    assert torch.allclose(g_ours, g_ref, atol=1e-12)


def test_gradcheck_and_extreme_logits():
    torch.manual_seed(1)
    x = torch.randn(2, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: entropy_from_logits(z, chunk_size=4), (x,))
    peaked = torch.tensor([[1000.0, 0.0, -1000.0], [5.0, 5.0, 5.0]])
    h = entropy_from_logits(peaked, chunk_size=2)
    assert h[0].item() == pytest.approx(0.0, abs=1e-6)
    assert h[1].item() == pytest.approx(torch.log(torch.tensor(3.0)).item(), rel=1e-6)


def test_half_precision_accumulates_in_float32():
    torch.manual_seed(2)
    logits = torch.randn(4, 3000) * 3
    h16 = entropy_from_logits(logits.bfloat16(), chunk_size=512)
    assert h16.dtype == torch.bfloat16
    assert torch.allclose(h16.float(), reference_entropy(logits.bfloat16().float()), rtol=1e-2)
