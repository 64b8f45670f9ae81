"""Section V experiments: the extra term of Theorem V.1 and the Gibbs stationary point, by hand."""

import math

import torch

from harness.theory.entreg import ascend_reg, extra_terms
from harness.theory.softmax import cov_pi, entropy, entropy_grad, gibbs, logp, mean_pi, probs, t

Z2 = t([0.0, math.log(3.0)])  # pi = (1/4, 3/4), log pi_1 - log pi_2 = -log 3


def test_extra_term_two_actions_by_hand():
    d2 = math.log(3) ** 2
    terms = extra_terms(Z2)
    assert abs(float(terms["paper_Var(log pi)"]) - 3 / 16 * d2) < 1e-14  # p1 p2 d^2
    assert abs(float(terms["exact_E_pi[pi (log pi - mu)^2]"]) - 9 / 128 * d2) < 1e-14  # sum p^2 (x - mu)^2


def test_exact_form_is_the_covariance_in_the_derivation():
    z = t(torch.randn(50, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2)
    p, lp = probs(z), logp(z)
    direct = cov_pi(p, lp, p * (lp - mean_pi(p, lp)))
    assert abs(float(direct - extra_terms(z)["exact_E_pi[pi (log pi - mu)^2]"])) < 1e-14


def test_regularised_step_entropy_change_matches_exact_term():
    # reward 0: the whole first-order change is the extra term; measured by finite difference
    alpha, eta = 0.3, 1e-6
    dh = float(entropy(Z2 + eta * alpha * entropy_grad(Z2)) - entropy(Z2))
    assert abs(dh / (alpha * eta) - 9 / 128 * math.log(3) ** 2) < 1e-5


def test_gradient_ascent_reaches_gibbs():
    r = t([0.0, 0.5, 1.0])
    z = ascend_reg(t([1.0, 0.0, -1.0]), r, [1.0], steps=2000, eta=1.0)
    assert float((probs(z[0]) - gibbs(r, 1.0)).abs().max()) < 1e-9


def test_regularised_ascent_is_scale_invariant():
    # J + alpha H with rewards c*r, coefficient c*alpha and step eta/c follows the same logits (cor_v1's window shift)
    r = t([0.0, 0.3, 1.0, 0.7])
    z0 = t([0.5, -0.2, 0.0, 0.1])
    a = ascend_reg(z0, r, [0.05], steps=50, eta=1.0)
    b = ascend_reg(z0, 10 * r, [0.5], steps=50, eta=0.1)
    assert torch.allclose(a, b, atol=1e-12)
