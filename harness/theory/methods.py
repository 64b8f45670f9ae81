"""Clip-Cov / KL-Cov as the lab uses them: the harness's own method objects (docs/contracts.md §1).

``get(name, **params)`` returns the harness method (``harness.get_method``). ``Fallback*`` is a small,
independent re-statement of the official semantics (reference §1.3-1.4); the tests compare the harness with it,
and ``THEORY_FALLBACK=1`` runs the lab on it (``source(m) == "fallback"``), so the report says which code it tested.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

# lab parameter name -> harness hyperparameter name(s) (methods/clip_cov.py, methods/kl_cov.py)
HARNESS_PARAMS = {
    "clip_cov": {"clip_ratio": ("clip_ratio",), "lb": ("cov_lb",), "ub": ("cov_ub",), "eps": ("eps_low", "eps_high")},
    "kl_cov": {"k_ratio": ("k_ratio",), "beta": ("beta",)},
}


@dataclass
class Out:
    loss: torch.Tensor
    metrics: dict


class FallbackClipCov:
    source = "fallback"

    def __init__(self, clip_ratio=2e-4, lb=1.0, ub=5.0, eps=1.0):
        self.r, self.lb, self.ub, self.eps = clip_ratio, lb, ub, eps

    def selection_plan(self, log_probs, old_log_probs, A, mask, *, entropy=None, generator=None):
        ratio = (log_probs - old_log_probs).exp()
        l1, l2 = -A * ratio, -A * ratio.clamp(1 - self.eps, 1 + self.eps)
        m = mask.bool()
        n = mask.sum()
        lp = log_probs.detach()
        cov = (A - (A * mask).sum() / n) * (lp - (lp * mask).sum() / n)
        cand = (m & ~(l2 > l1) & (cov > self.lb) & (cov < self.ub)).flatten().nonzero().flatten()
        k = max(int(self.r * int(n)), 1)
        pick = cand[torch.randperm(len(cand), generator=generator)[: min(k, len(cand))]]
        sel = torch.zeros(mask.numel(), dtype=torch.bool)
        sel[pick] = True
        return sel.view_as(mask)

    def policy_loss(self, log_probs, old_log_probs, A, mask, *, generator=None, selected=None, **_):
        if selected is None:
            selected = self.selection_plan(log_probs, old_log_probs, A, mask, generator=generator)
        ratio = (log_probs - old_log_probs).exp()
        l = torch.maximum(-A * ratio, -A * ratio.clamp(1 - self.eps, 1 + self.eps)) * (~selected)
        return Out((l * mask).sum() / mask.sum(), {"selected/count": float(selected.sum())})


class FallbackKLCov:
    source = "fallback"

    def __init__(self, k_ratio=2e-3, beta=1.0):
        self.k, self.beta = k_ratio, beta

    def selection_plan(self, log_probs, old_log_probs, A, mask, *, entropy=None, generator=None):
        m = mask.bool().flatten()
        idx = m.nonzero().flatten()
        a, lp = A.flatten()[idx], log_probs.detach().flatten()[idx]
        cov = (a - a.mean()) * (lp - lp.mean())
        sel = torch.zeros(mask.numel(), dtype=torch.bool)
        sel[idx[torch.topk(cov, max(1, int(len(idx) * self.k))).indices]] = True
        return sel.view_as(mask)

    def policy_loss(self, log_probs, old_log_probs, A, mask, *, generator=None, selected=None, **_):
        if selected is None:
            selected = self.selection_plan(log_probs, old_log_probs, A, mask, generator=generator)
        lr = log_probs - old_log_probs
        l = -A * lr.exp() + self.beta * lr.abs() * selected
        return Out((l * mask).sum() / mask.sum(), {"selected/count": float(selected.sum())})


FALLBACK = {"clip_cov": FallbackClipCov, "kl_cov": FallbackKLCov}


def harness_available() -> bool:
    if os.environ.get("THEORY_FALLBACK") == "1":
        return False
    import harness

    return hasattr(harness, "get_method")


def get(name: str, **params):
    """The method ``name`` with lab-named ``params``, from the harness when available."""
    if harness_available():
        import harness

        kw = {hk: v for k, v in params.items() for hk in HARNESS_PARAMS[name][k]}
        return harness.get_method(name, **kw)
    return FALLBACK[name](**params)


def source(m) -> str:
    return getattr(m, "source", "harness")


def token_grads(m, log_probs, old_log_probs, A, mask, generator=None):
    """(loss, dL/dlog_probs per token, selected mask) from the method's own loss code."""
    lp = log_probs.detach().clone().requires_grad_(True)
    sel = m.selection_plan(lp.detach(), old_log_probs, A, mask, generator=generator)
    out = m.policy_loss(lp, old_log_probs, A, mask, generator=generator, selected=sel)
    (g,) = torch.autograd.grad(out.loss, lp)
    return out.loss.detach(), g, sel
