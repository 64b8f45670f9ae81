"""Uncertainty for numbers that rank methods: mean ± 95% Student-t confidence interval over seeds, paired
(same-seed) differences and ratios with their CI, and Welch's interval when seeds do not match.

An interval is ``mean ± half``; ``half`` is NaN when n < 2 (one seed says nothing about the spread), and then
nothing may be called better than anything else (:func:`excludes` is False).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

CONF = 0.95


@dataclass(frozen=True)
class Interval:
    mean: float
    half: float  # half-width of the 95% CI; NaN when n < 2
    n: int
    paired: bool = True  # False: a Welch interval between two unpaired samples

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half

    def to_dict(self) -> dict:
        f = lambda v: None if not math.isfinite(v) else float(v)  # noqa: E731
        return {"mean": f(self.mean), "ci95": f(self.half), "n": self.n}


def _t_quantile(q: float, dof: float) -> float:
    """Student-t quantile (scipy imported here, not at module import, so the CLI loads without it)."""
    from scipy import stats

    return stats.t.ppf(q, dof)


def _finite(values) -> np.ndarray:
    v = np.asarray(list(values), dtype=float).ravel()
    return v[np.isfinite(v)]


def mean_ci(values, conf: float = CONF) -> Interval:
    """Mean and Student-t half-width ``t_{(1+conf)/2, n-1} · s / sqrt(n)`` of the finite values."""
    v = _finite(values)
    n = int(v.size)
    if n == 0:
        return Interval(math.nan, math.nan, 0)
    mean = float(v.mean())
    if n < 2:
        return Interval(mean, math.nan, n)
    half = float(_t_quantile((1 + conf) / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return Interval(mean, half, n)


def _common(a: Mapping, b: Mapping) -> list:
    return sorted(
        k
        for k in set(a) & set(b)
        if isinstance(a[k], (int, float))
        and isinstance(b[k], (int, float))
        and math.isfinite(a[k])
        and math.isfinite(b[k])
    )


def paired_diff(a: Mapping, b: Mapping, conf: float = CONF) -> Interval:
    """``a - b`` over the seeds both hold (``{seed: value}``): mean of the per-seed differences with its t CI."""
    keys = _common(a, b)
    return mean_ci([a[k] - b[k] for k in keys], conf)


def paired_ratio(a: Mapping, b: Mapping, conf: float = CONF) -> Interval:
    """``a / b`` per common seed (b != 0), then mean ± t CI of the ratios."""
    keys = [k for k in _common(a, b) if b[k] != 0]
    return mean_ci([a[k] / b[k] for k in keys], conf)


def welch_diff(a, b, conf: float = CONF) -> Interval:
    """Difference of means of two independent samples with Welch's t interval (NaN half if either n < 2)."""
    x, y = _finite(a), _finite(b)
    if x.size == 0 or y.size == 0:
        return Interval(math.nan, math.nan, 0, paired=False)
    d = float(x.mean() - y.mean())
    n = int(min(x.size, y.size))
    if x.size < 2 or y.size < 2:
        return Interval(d, math.nan, n, paired=False)
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0:
        return Interval(d, 0.0, n, paired=False)
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return Interval(d, float(_t_quantile((1 + conf) / 2, dof) * se), n, paired=False)


def difference(a: Mapping, b: Mapping, conf: float = CONF) -> Interval:
    """Paired difference when the two share at least two seeds, else Welch's interval."""
    if len(_common(a, b)) >= 2:
        return paired_diff(a, b, conf)
    return welch_diff(list(a.values()), list(b.values()), conf)


def welch_test(a, b) -> tuple[float, float, int]:
    """Two-sided Welch t test of ``mean(a) == mean(b)`` for two independent samples: (difference, p, min n).
    p is NaN when either n < 2; with zero spread in both p is 0 (means differ) or 1 (equal)."""
    from scipy import stats as sps

    x, y = _finite(a), _finite(b)
    n = int(min(x.size, y.size))
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan, 0
    d = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return d, math.nan, n
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    if vx + vy == 0:
        return d, (1.0 if d == 0 else 0.0), n
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return d, float(2 * sps.t.sf(abs(d) / math.sqrt(vx + vy), dof)), n


def difference_test(a: Mapping, b: Mapping) -> tuple[Interval, float]:
    """:func:`difference` (paired when the two share at least two seeds, else Welch) with the two-sided p of the
    matching t test: the one-sample t test of the per-seed differences, or Welch's."""
    iv = difference(a, b)
    if iv.paired:
        keys = _common(a, b)
        return iv, t_test([a[k] - b[k] for k in keys])[1]
    return iv, welch_test(list(a.values()), list(b.values()))[1]


def excludes(iv: Interval, value: float = 0.0) -> bool:
    """True when the CI is defined and lies strictly on one side of ``value``."""
    return math.isfinite(iv.half) and (iv.lo > value or iv.hi < value)


# ---------------------------------------------------------------------------------------------- tests, ratios, r
def t_test(values, null: float = 0.0) -> tuple[float, float, int]:
    """Two-sided one-sample Student-t test of ``mean == null`` over the finite values: (mean, p, n).
    p is NaN when n < 2; with zero spread p is 0 (mean != null) or 1 (mean == null)."""
    from scipy import stats as sps

    v = _finite(values)
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(v.mean())
    if n < 2:
        return mean, math.nan, n
    sd = float(v.std(ddof=1))
    if sd == 0:
        return mean, (1.0 if mean == null else 0.0), n
    t = (mean - null) / (sd / math.sqrt(n))
    return mean, float(2 * sps.t.sf(abs(t), n - 1)), n


@dataclass(frozen=True)
class Bounds:
    """An estimate with an asymmetric interval [lo, hi] (a ratio back-transformed from the log scale, a
    correlation back-transformed from Fisher's z) and the two-sided p of the test against ``null``."""

    estimate: float
    lo: float
    hi: float
    n: int
    p: float = math.nan
    null: float = math.nan

    def to_dict(self) -> dict:
        f = lambda v: None if not math.isfinite(v) else float(v)  # noqa: E731
        return {
            "estimate": f(self.estimate),
            "lo": f(self.lo),
            "hi": f(self.hi),
            "n": self.n,
            "p": f(self.p),
            "null": f(self.null),
        }


def _transformed(values, forward, back, null: float, conf: float) -> Bounds:
    """t interval and t test on ``forward(values)``, bounds mapped back with ``back``."""
    v = _finite(values)
    z = forward(v)
    iv = mean_ci(z, conf)
    _, p, _ = t_test(z, float(forward(np.array([null]))[0])) if math.isfinite(null) else (None, math.nan, None)
    if iv.n == 0:
        return Bounds(math.nan, math.nan, math.nan, 0, math.nan, null)
    lo, hi = (back(iv.lo), back(iv.hi)) if math.isfinite(iv.half) else (math.nan, math.nan)
    return Bounds(float(back(iv.mean)), float(lo), float(hi), iv.n, p, null)


def log_ratio_ci(ratios, null: float = 1.0, conf: float = CONF) -> Bounds:
    """Geometric mean of positive ratios with the t interval of mean(log ratio) mapped back by exp (never a
    negative bound), and the t test of mean(log ratio) == log(null). Non-positive ratios raise."""
    v = _finite(ratios)
    if (v <= 0).any():
        raise ValueError(f"log-scale ratio interval needs positive ratios, got {sorted(v[v <= 0])[:3]}")
    return _transformed(v, np.log, math.exp, null, conf)


def paired_log_ratio(a: Mapping, b: Mapping, null: float = 1.0, conf: float = CONF) -> Bounds:
    """``a / b`` per common seed (both > 0) on the log scale: see :func:`log_ratio_ci`."""
    keys = [k for k in _common(a, b) if a[k] > 0 and b[k] > 0]
    return log_ratio_ci([a[k] / b[k] for k in keys], null, conf)


def fisher_z_ci(rs, null: float = 0.0, conf: float = CONF) -> Bounds:
    """Per-run correlations summarised over runs: the t interval of mean(atanh r) mapped back by tanh (each run
    is one observation: no pooling of a run's autocorrelated steps), and the t test of mean(atanh r) ==
    atanh(null). |r| = 1 is clipped to 1 - 1e-12."""
    v = np.clip(_finite(rs), -1 + 1e-12, 1 - 1e-12)
    return _transformed(v, np.arctanh, math.tanh, null, conf)


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order. NaN p-values
    (tests that could not be run) are left NaN and do not count towards the family size."""
    p = [float(x) if x is not None else math.nan for x in pvalues]
    idx = sorted((i for i, x in enumerate(p) if math.isfinite(x)), key=lambda i: p[i])
    m = len(idx)
    out = [math.nan] * len(p)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
