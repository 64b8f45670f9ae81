"""Clip-Cov / KL-Cov through the harness code, against hand-solved token batches and an independent restatement."""

import math

import torch

from harness.theory import methods as M
from harness.theory.covmethods import Population, natural_step, sign_form, token_cov, vanilla_step
from harness.theory.softmax import entropy, logp, probs, t


def test_population_is_an_exact_distribution():
    pop = Population(12, 3000, seed=0)
    p = probs(pop.z)
    assert torch.allclose(p, t(pop.counts / pop.n), atol=1e-15)
    assert abs(float((p * pop.adv).sum())) < 1e-14 and abs(float((p * pop.adv**2).sum()) - 1) < 1e-12
    # the batch mean of C equals the population covariance Cov_pi(log pi, A)
    lp = logp(pop.z)
    cov = float((p * (lp - (p * lp).sum()) * pop.adv).sum())
    assert abs(float(token_cov(pop).mean()) - cov) < 1e-12


def test_clip_cov_hand_batch():
    # 10 tokens; C_i = (A_i - 0)(lp_i - mean lp): one token inside (1, 5); clip_ratio 0.2 allows 2 -> it is detached
    lp = t([[-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0]])
    adv = t([[0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.5, -0.5, 2.0, -2.0]])
    mask = torch.ones(1, 10)
    m = M.get("clip_cov", clip_ratio=0.2, lb=1.0, ub=5.0, eps=1.0)
    _, g, sel = M.token_grads(m, lp, lp, adv, mask)
    # mean lp = -0.6: C = A (lp + 0.6): token 8: 2 * 1.6 = 3.2 (in), token 9: -3.2, tokens 4..7: +-0.2
    assert sel[0].tolist() == [False] * 8 + [True, False]
    expected = -adv / 10
    expected[0, 8] = 0.0
    assert torch.allclose(g, expected, atol=1e-12)


def test_natural_step_of_vanilla_loss_is_the_advantage():
    pop = Population(10, 2000, seed=1)
    m = M.get("kl_cov", k_ratio=1e-9, beta=0.0)  # plain -A r loss
    u, _, _ = pop.grads(m, pop.z)
    assert torch.allclose(natural_step(u, pop.z), pop.adv, atol=1e-10)
    assert torch.allclose(vanilla_step(u, pop.z), probs(pop.z) * pop.adv, atol=1e-10)


def test_kl_cov_penalty_one_selected_token_by_hand():
    # two actions, tokens [0, 1, 1]; top covariance token is one of action 1; pi moved up on action 1
    pop = Population(2, 4, seed=0)
    z = pop.z + t([0.0, 0.3])
    m1, m0 = M.get("kl_cov", k_ratio=0.25, beta=1.0), M.get("kl_cov", k_ratio=0.25, beta=0.0)
    u1, sel, _ = pop.grads(m1, z)
    u0, _, _ = pop.grads(m0, z)
    pen = vanilla_step(u1, z) - vanilla_step(u0, z)
    a = int(pop.actions[sel[0]][0])
    sgn = math.copysign(1.0, float(logp(z)[a] - logp(pop.z)[a]))
    e = torch.zeros(pop.k, dtype=torch.float64)
    e[a] = 1.0
    assert int(sel.sum()) == 1
    assert torch.allclose(pen, -(1.0 / pop.n) * sgn * (e - probs(z)), atol=1e-12)
    assert torch.allclose(pen, sign_form(pop, z, sel, 1.0), atol=1e-12)


def test_kl_cov_penalty_is_zero_on_policy():
    pop = Population(8, 1000, seed=2)
    u1, _, _ = pop.grads(M.get("kl_cov", k_ratio=0.05, beta=1.0), pop.z)
    u0, _, _ = pop.grads(M.get("kl_cov", k_ratio=0.05, beta=0.0), pop.z)
    assert torch.equal(u1, u0)


def test_harness_matches_independent_restatement():
    g = torch.Generator().manual_seed(3)
    lp = -torch.rand(2, 400, generator=g, dtype=torch.float64) * 4
    old = lp + 0.2 * torch.randn(2, 400, generator=g, dtype=torch.float64)
    adv = torch.randn(2, 400, generator=g, dtype=torch.float64)
    mask = (torch.rand(2, 400, generator=g) > 0.1).float()
    for name, kw in (
        ("clip_cov", dict(clip_ratio=0.01, lb=0.5, ub=5.0, eps=1.0)),
        ("kl_cov", dict(k_ratio=0.01, beta=1.0)),
    ):
        h, f = M.get(name, **kw), M.FALLBACK[name](**kw)
        assert M.source(h) == "harness" and M.source(f) == "fallback"
        lh, gh, sh = M.token_grads(h, lp, old, adv, mask, generator=torch.Generator().manual_seed(0))
        lf, gf, sf = M.token_grads(f, lp, old, adv, mask, generator=torch.Generator().manual_seed(0))
        assert torch.equal(sh.bool(), sf.bool()) and int(sh.sum()) >= 1
        assert abs(float(lh - lf)) < 1e-9 and float((gh - gf).abs().max()) < 1e-9


def test_clip_cov_step_lowers_entropy_drop_by_removed_covariance():
    pop = Population(20, 5000, seed=4)
    m = M.get("clip_cov", clip_ratio=0.05, lb=0.5, ub=50.0, eps=1.0)
    u, sel, _ = pop.grads(m, pop.z, generator=torch.Generator().manual_seed(0))
    c = token_cov(pop)
    eta = 1e-5
    dh = float(entropy(pop.z + eta * natural_step(u, pop.z)) - entropy(pop.z))
    assert abs(dh - (-eta * float(c[~sel[0]].sum()) / pop.n)) < 1e-3 * abs(dh)
