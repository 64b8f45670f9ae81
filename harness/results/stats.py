"""Uncertainty for numbers that rank methods: mean ± 95% Student-t confidence interval over seeds, paired
(same-seed) differences and ratios with their CI, and Welch's interval when seeds do not match.

An interval is ``mean ± half``; ``half`` is NaN when n < 2 (one seed says nothing about the spread), and then
nothing may be called better than anything else (:func:`excludes` is False).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

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
    return sorted(k for k in set(a) & set(b)
                  if isinstance(a[k], (int, float)) and isinstance(b[k], (int, float))
                  and math.isfinite(a[k]) and math.isfinite(b[k]))


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
    dof = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    return Interval(d, float(_t_quantile((1 + conf) / 2, dof) * se), n, paired=False)


def difference(a: Mapping, b: Mapping, conf: float = CONF) -> Interval:
    """Paired difference when the two share at least two seeds, else Welch's interval."""
    if len(_common(a, b)) >= 2:
        return paired_diff(a, b, conf)
    return welch_diff(list(a.values()), list(b.values()), conf)


def excludes(iv: Interval, value: float = 0.0) -> bool:
    """True when the CI is defined and lies strictly on one side of ``value``."""
    return math.isfinite(iv.half) and (iv.lo > value or iv.hi < value)
