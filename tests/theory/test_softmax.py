"""Core softmax machinery against cases solved by hand."""

import math

import numpy as np
import torch

from harness.theory.softmax import (
    Tree,
    advantage,
    cov_pi,
    entropy,
    entropy_grad,
    first_order_dH,
    fit_order,
    gibbs,
    largest_remainder_counts,
    probs,
    t,
)

# two actions with pi = (1/4, 3/4): z = (0, log 3)
Z2 = t([0.0, math.log(3.0)])


def test_entropy_uniform_is_log_k():
    assert abs(float(entropy(t(np.zeros(7)))) - math.log(7)) < 1e-15


def test_entropy_gradient_two_actions_by_hand():
    # H(p) with p = sigmoid(z2 - z1): dH/dz2 = p(1-p) log((1-p)/p) = (3/16) log(1/3), dH/dz1 = -dH/dz2
    g = entropy_grad(Z2)
    assert abs(float(g[1]) + 3 / 16 * math.log(3)) < 1e-15
    assert abs(float(g[0]) - 3 / 16 * math.log(3)) < 1e-15


def test_cov_pi_by_hand():
    assert abs(float(cov_pi(t([0.5, 0.5]), t([0.0, 2.0]), t([1.0, 3.0]))) - 1.0) < 1e-15
    # weighted: p = (1/4, 3/4), x = (0, 4), y = x: Var = 4^2 * 3/16 = 3
    assert abs(float(cov_pi(t([0.25, 0.75]), t([0.0, 4.0]), t([0.0, 4.0]))) - 3.0) < 1e-15


def test_first_order_prediction_matches_hand_derivative():
    eps = 1e-6
    exact = float(entropy(Z2 + t([0.0, eps])) - entropy(Z2))
    assert abs(float(first_order_dH(Z2, t([0.0, eps]))) - (-3 / 16 * math.log(3) * eps)) < 1e-18
    assert abs(exact - (-3 / 16 * math.log(3) * eps)) < 1e-11


def test_policy_gradient_two_actions_by_hand():
    # J = p1 r1 + p2 r2 with r = (0, 1): dJ/dz2 = p2 (1 - p2) = 3/16 = pi_2 * A_2 with A_2 = 1 - 3/4
    r = t([0.0, 1.0])
    pa = probs(Z2) * advantage(Z2, r)
    assert abs(float(pa[1]) - 3 / 16) < 1e-15 and abs(float(pa[0]) + 3 / 16) < 1e-15


def test_fit_order_recovers_power():
    eta = np.logspace(-1, -4, 6)
    assert abs(fit_order(eta, 3 * eta**2) - 2) < 1e-12
    assert abs(fit_order(eta, 0.5 * eta**1.5) - 1.5) < 1e-12


def test_largest_remainder_counts():
    p = np.array([0.333, 0.333, 0.334])
    c = largest_remainder_counts(p, 10)
    assert c.sum() == 10 and np.all(np.abs(c - 10 * p) < 1)


def test_gibbs_two_actions_by_hand():
    # softmax(r/alpha) for r = (0, 1), alpha = 0.5: p2 = sigmoid(2)
    p = gibbs(t([0.0, 1.0]), 0.5)
    assert abs(float(p[1]) - 1 / (1 + math.exp(-2))) < 1e-15


def test_tree_gradient_has_visitation_weight():
    tree = Tree(2, 2, seed=0)
    z0, z1 = tree.z0.clone().requires_grad_(True), tree.z1.clone().requires_grad_(True)
    _, g1 = torch.autograd.grad(tree.J(z0, z1), (z0, z1))
    _, a1 = tree.advantages(tree.z0, tree.z1)
    p0, p1 = probs(tree.z0), probs(tree.z1)
    # hand: child a1 is reached with probability p0[a1], so dJ/dz1[a1, a2] = p0[a1] * p1 * (r - V(a1))
    assert torch.allclose(g1, p0[:, None] * p1 * a1, atol=1e-15)
    assert not torch.allclose(g1, p1 * a1, atol=1e-3)


def test_first_order_error_is_the_hand_second_derivative():
    # along d = (0, 1) the entropy is H(x) with x = z2 - z1, H'(x) = -x p(1-p), H''(x) = -p(1-p) - x p(1-p)(1-2p);
    # at x = log 3 (p = 3/4): H'' = -3/16 + (3/32) log 3, so the first-order error is |H''| eps^2 / 2
    from harness.theory.dynamics import first_order_errors

    eps = np.array([1e-3, 1e-4])
    _, err = first_order_errors(Z2, t([0.0, 1.0]), etas=eps)
    expected = abs(-3 / 16 + 3 / 32 * math.log(3)) * eps**2 / 2
    assert np.allclose(err, expected, rtol=1e-2)
