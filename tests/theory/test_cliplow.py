"""The clip-low experiment's machinery: exact logit gradient, first-order entropy change, and the measured signs."""

import torch

from harness.theory.cliplow import first_order_dh, logit_grad, simulate
from harness.theory.softmax import DT


def test_logit_grad_is_the_autograd_gradient():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 2, 5, generator=g, dtype=DT, requires_grad=True)
    states, actions = torch.tensor([0, 1, 1, 0]), torch.randint(0, 5, (3, 4), generator=g)
    coef = torch.randn(3, 4, generator=g, dtype=DT)
    lp = torch.log_softmax(z, -1)
    (coef * lp[torch.arange(3)[:, None], states, actions]).sum().backward()
    mine = logit_grad(lp.detach(), torch.arange(3)[:, None], states, actions, coef)
    assert torch.allclose(mine, z.grad, atol=1e-14, rtol=0)


def test_first_order_entropy_change_matches_the_exact_change_to_second_order():
    g = torch.Generator().manual_seed(1)
    z, dz = torch.randn(2, 3, 6, generator=g, dtype=DT), torch.randn(2, 3, 6, generator=g, dtype=DT)

    def h(x):
        lp = torch.log_softmax(x, -1)
        return -(lp.exp() * lp).sum(-1).mean(-1)

    errors = [
        (h(z + e * dz) - h(z) - first_order_dh(torch.log_softmax(z, -1), e * dz)).abs().max() for e in (1e-3, 1e-4)
    ]
    assert 80 < float(errors[0] / errors[1]) < 120  # O(eps^2)


def test_without_clipping_there_is_no_clip_effect():
    r = simulate(100.0, 100.0, seeds=8, steps=5)
    assert r["clipfrac"] == {"clip_low": 0.0, "clip_high": 0.0}
    assert r["effect"]["clip_low"].abs().max() == 0 and r["effect"]["clip_high"].abs().max() == 0


def test_clip_low_raises_and_clip_high_lowers_entropy_per_update():
    r = simulate(0.2, 0.2, seeds=32, steps=15, logit_scale=4.0)
    assert r["clipfrac"]["clip_low"] > 0.01 and r["clipfrac"]["clip_high"] > 0.01
    assert float(r["effect"]["clip_low"].mean()) > 0 > float(r["effect"]["clip_high"].mean())
