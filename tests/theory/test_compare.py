"""Section VII machinery against closed forms."""

import math

import numpy as np
import torch

from harness.theory.compare import linear_topk, margin, mei_smoothness, smooth_kl_step
from harness.theory.softmax import advantage, kl, probs, random_bandit, t


def test_margin_solves_the_kl_constraint():
    z = t([[0.0, 0.0]])
    d = t([[0.0, 1.0]])
    g = float(margin(z, d, eps=0.01)[0])
    # KL(uniform || softmax(0, g)) = log(cosh(g/2)) for two actions
    assert abs(math.log(math.cosh(g / 2)) - 0.01) < 1e-9
    assert float(kl(probs(z), z + 1.01 * g * d)) > 0.01


def test_linear_topk_matches_sorting_with_ties():
    rng = np.random.default_rng(0)
    v = rng.integers(0, 20, 1000).astype(float)
    k = 37
    ref = np.zeros(1000, bool)
    ref[np.argsort(-v, kind="stable")[:k]] = True  # stable sort: ties in position order
    assert np.array_equal(linear_topk(v, k), ref)


def test_smoothness_constant_bounds_the_hessian():
    z, r = random_bandit(6, seed=0)
    h = torch.autograd.functional.hessian(lambda x: (probs(x) * r).sum(), z)
    assert float(torch.linalg.eigvalsh(h).abs().max()) <= mei_smoothness(6, 0.0)


def test_smooth_kl_step_on_policy_is_the_policy_gradient():
    z, r = random_bandit(5, seed=1)
    assert torch.allclose(smooth_kl_step(z, z, r, beta=3.0), probs(z) * advantage(z, r), atol=1e-15)
