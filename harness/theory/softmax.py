"""Exact softmax-policy machinery in float64: bandits, contextual bandits and depth-2 trees.

Everything is an expectation computed in closed form (sums over actions), never sampled. Logits ``z`` have the
action axis last; a contextual bandit is ``z`` of shape (S, K) with a state distribution ``d`` of shape (S,).
"""

from __future__ import annotations

import numpy as np
import torch

DT = torch.float64


def t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=DT)


def probs(z: torch.Tensor) -> torch.Tensor:
    return torch.softmax(z, -1)


def logp(z: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(z, -1)


def entropy(z: torch.Tensor) -> torch.Tensor:
    lp = logp(z)
    return -(lp.exp() * lp).sum(-1)


def mean_pi(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (p * x).sum(-1, keepdim=True)


def cov_pi(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cov_{a~p}(x_a, y_a) along the last axis."""
    return (p * (x - mean_pi(p, x)) * (y - mean_pi(p, y))).sum(-1)


def var_pi(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return cov_pi(p, x, x)


def entropy_grad(z: torch.Tensor) -> torch.Tensor:
    """Lemma IV.1 closed form: dH/dz_a = -pi_a (log pi_a - E_pi[log pi])."""
    p, lp = probs(z), logp(z)
    return -p * (lp - mean_pi(p, lp))


def advantage(z: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """True advantage A(s,a) = r(s,a) - E_pi r(s,.)."""
    return r - mean_pi(probs(z), r)


def first_order_dH(z: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
    """Lemma IV.2 prediction: H(z+dz) - H(z) ~ -Cov_pi(log pi, dz)."""
    return -cov_pi(probs(z), logp(z), dz)


def kl(p_from: torch.Tensor, z_to: torch.Tensor) -> torch.Tensor:
    """KL(p_from || softmax(z_to)) along the last axis."""
    return (p_from * (torch.log(p_from.clamp_min(1e-300)) - logp(z_to))).sum(-1)


# -- problems ---------------------------------------------------------------------------------------
def random_bandit(k: int, seed: int, scale: float = 2.0, states: int | None = None):
    """Logits z ~ N(0, scale^2) and rewards r ~ U(0,1); with ``states``, a contextual bandit with d ~ Dirichlet."""
    g = np.random.default_rng(seed)
    shape = (k,) if states is None else (states, k)
    z, r = t(g.normal(0, scale, shape)), t(g.uniform(0, 1, shape))
    if states is None:
        return z, r
    return z, r, t(g.dirichlet(np.ones(states)))


def contextual_J(z: torch.Tensor, r: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """J = sum_s d(s) sum_a pi(a|s) r(s,a)."""
    return (d * (probs(z) * r).sum(-1)).sum()


class Tree:
    """Depth-2 tree: root state with K1 actions, each leading to a child state with K2 actions, reward r(a1,a2).

    Logits: ``z0`` (K1,), ``z1`` (K1, K2). State weights (visitation) are d(root)=1, d(child a1)=pi(a1).
    """

    def __init__(self, k1: int, k2: int, seed: int, scale: float = 2.0):
        g = np.random.default_rng(seed)
        self.z0, self.z1 = t(g.normal(0, scale, k1)), t(g.normal(0, scale, (k1, k2)))
        self.r = t(g.uniform(0, 1, (k1, k2)))

    def J(self, z0, z1):
        return (probs(z0) * (probs(z1) * self.r).sum(-1)).sum()

    def advantages(self, z0, z1):
        """Per-state true advantages: root A(a1) = Q(a1) - V, child A(a1,a2) = r - V(a1)."""
        q = (probs(z1) * self.r).sum(-1)
        return q - (probs(z0) * q).sum(), self.r - q[:, None]

    def visitation(self, z0):
        return probs(z0)


# -- helpers ----------------------------------------------------------------------------------------
def fit_order(eta, err) -> float:
    """Slope of log(err) vs log(eta): the order p in err ~ C eta^p."""
    eta, err = np.asarray(eta, float), np.asarray(err, float)
    keep = err > 0
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(eta[keep]), np.log(err[keep]), 1)[0])


def largest_remainder_counts(p: np.ndarray, n: int) -> np.ndarray:
    """Integer counts summing to n that are closest to n*p (largest-remainder rounding)."""
    raw = np.asarray(p, float) * n
    c = np.floor(raw).astype(int)
    c[np.argsort(-(raw - c))[: n - c.sum()]] += 1
    return c


def population_batch(counts: np.ndarray) -> torch.Tensor:
    """Token -> action index for a batch in which action a appears counts[a] times (an exact population)."""
    return torch.repeat_interleave(torch.arange(len(counts)), torch.as_tensor(counts))


def gibbs(r: torch.Tensor, alpha: float) -> torch.Tensor:
    """Maximiser of E_pi r + alpha H(pi): softmax(r / alpha)."""
    return torch.softmax(r / alpha, -1)
