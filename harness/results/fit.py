"""The entropy law R = -a·exp(H) + b: closed-form least squares in (exp(H), R), R², a robust check,
prediction of late training from early training, and a/b against log model size.

With x = exp(H) the law is linear, R = b - a·x, so ordinary least squares gives a and b exactly; the
robust check is the Theil–Sen estimator (median of pairwise slopes) on the same points. The ceiling is
the predicted score at H = 0: -a + b. Units of a, b and the ceiling are those of the score given.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

MIN_POINTS = 3
_THEIL_SEN_MAX = 1500  # pairwise slopes are O(n²); larger inputs use an evenly spaced subsample


@dataclass
class LawFit:
    a: float
    b: float
    r2: float
    ceiling: float
    n_points: int  # points used for the fit
    rmse: float  # in-sample
    a_robust: float  # Theil–Sen
    b_robust: float
    entropy_min: float
    entropy_max: float
    fit_fraction: float | None = None
    n_heldout: int = 0
    rmse_heldout: float | None = None
    label: str | None = None
    model_params: float | None = None

    @property
    def warning(self) -> str | None:
        """A fit that contradicts the law's premise (score bought with entropy) is reported, not hidden."""
        if self.a <= 0:
            return "a <= 0: the score does not rise as entropy falls, so the law does not describe these points"
        return None

    def predict(self, entropy) -> np.ndarray:
        return -self.a * np.exp(np.asarray(entropy, dtype=float)) + self.b

    def to_dict(self) -> dict:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        d["warning"] = self.warning
        return d


def _clean(entropy, score) -> tuple[np.ndarray, np.ndarray]:
    h = np.asarray(entropy, dtype=float).ravel()
    r = np.asarray(score, dtype=float).ravel()
    if h.shape != r.shape:
        raise ValueError(f"entropy and score have different lengths ({h.size} vs {r.size})")
    keep = np.isfinite(h) & np.isfinite(r)
    return h[keep], r[keep]


def ols_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """y ≈ slope·x + intercept by least squares; returns (slope, intercept, R²)."""
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx <= 0:
        raise ValueError("cannot fit: all x values are equal (entropy never changed)")
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    ss_tot = float(((y - ym) ** 2).sum())
    ss_res = float(((y - (slope * x + intercept)) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else math.nan
    return slope, intercept, r2


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Median of pairwise slopes and the median intercept: robust to a few outlying points."""
    if x.size > _THEIL_SEN_MAX:
        idx = np.linspace(0, x.size - 1, _THEIL_SEN_MAX).round().astype(int)
        x, y = x[idx], y[idx]
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    ok = dx != 0
    slope = float(np.median((y[j] - y[i])[ok] / dx[ok]))
    return slope, float(np.median(y - slope * x))


def fit_entropy_law(entropy, score, fit_fraction: float | None = None, label: str | None = None) -> LawFit:
    """Fit R = -a·exp(H) + b. Points must be in training-step order when ``fit_fraction`` is given:
    the fit then uses the first ``ceil(F·n)`` points and ``rmse_heldout`` is the error on the rest."""
    h, r = _clean(entropy, score)
    n_fit = h.size
    if fit_fraction is not None:
        if not 0 < fit_fraction < 1:
            raise ValueError(f"--fit-fraction must be in (0, 1), got {fit_fraction}")
        n_fit = math.ceil(fit_fraction * h.size)
        if h.size - n_fit < 1:
            raise ValueError(f"fit fraction {fit_fraction} of {h.size} points leaves nothing to predict")
    if n_fit < MIN_POINTS:
        raise ValueError(
            f"need at least {MIN_POINTS} points with both entropy and score to fit, got {n_fit}"
            + (f" (of {h.size})" if n_fit != h.size else "")
        )
    hf, rf = h[:n_fit], r[:n_fit]
    x = np.exp(hf)
    slope, intercept, r2 = ols_line(x, rf)
    a, b = -slope, intercept
    rs_slope, rs_intercept = theil_sen(x, rf)
    fit = LawFit(
        a=a,
        b=b,
        r2=r2,
        ceiling=b - a,
        n_points=int(n_fit),
        rmse=float(np.sqrt(np.mean((rf - (b - a * x)) ** 2))),
        a_robust=0.0 - rs_slope,
        b_robust=rs_intercept + 0.0,
        entropy_min=float(hf.min()),
        entropy_max=float(hf.max()),
        label=label,
    )
    if fit_fraction is not None:
        ht, rt = h[n_fit:], r[n_fit:]
        fit.fit_fraction = fit_fraction
        fit.n_heldout = int(ht.size)
        fit.rmse_heldout = float(np.sqrt(np.mean((rt - fit.predict(ht)) ** 2)))
    return fit


@dataclass
class SizeTrend:
    """a and b as linear functions of log10(model parameters)."""

    a_slope: float
    a_intercept: float
    a_r2: float
    b_slope: float
    b_intercept: float
    b_r2: float
    n_sizes: int

    def predict(self, params: float) -> dict:
        lg = math.log10(params)
        a = self.a_slope * lg + self.a_intercept
        b = self.b_slope * lg + self.b_intercept
        return {"model_params": params, "a": a, "b": b, "ceiling": b - a}

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def fit_size_trend(sizes, a_values, b_values) -> SizeTrend:
    """Fit a = α·log10(N) + β and b likewise over model sizes N (at least two distinct sizes)."""
    n = np.asarray(sizes, dtype=float)
    a = np.asarray(a_values, dtype=float)
    b = np.asarray(b_values, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n <= 0):
        raise ValueError("model sizes must be positive parameter counts (model_params in result.json)")
    if np.unique(n).size < 2:
        raise ValueError("need fits for at least two different model sizes to fit a, b against log size")
    lg = np.log10(n)
    a_s, a_i, a_r2 = ols_line(lg, a)
    b_s, b_i, b_r2 = ols_line(lg, b)
    return SizeTrend(a_s, a_i, a_r2, b_s, b_i, b_r2, int(np.unique(n).size))


def fit_groups(
    points, by: str = "run", fit_fraction: float | None = None, skipped: list[str] | None = None
) -> list[LawFit]:
    """Fit each run (``by="run"``) or each model, pooling its runs' points (``by="model"``).

    ``points`` is a DataFrame from :func:`harness.results.points.run_points`. Groups with too few points
    are skipped, with the reason appended to ``skipped``; the errors are raised when no group can be fitted."""
    if by not in ("run", "model"):
        raise ValueError(f"--by must be 'run' or 'model', got {by!r}")
    fits, errors = [], []
    key = "run_dir" if by == "run" else "model"
    for name, grp in points.groupby(key, sort=False):
        grp = grp.sort_values("step")
        label = (
            str(name) if by == "model" else f"{grp['model'].iloc[0]} {grp['label'].iloc[0]} seed={grp['seed'].iloc[0]}"
        )
        try:
            f = fit_entropy_law(grp["entropy"], grp["score"], fit_fraction=fit_fraction, label=label)
        except ValueError as e:
            errors.append(f"{name}: {e}")
            continue
        size = grp["model_params"].max()
        f.model_params = None if size != size else float(size)
        fits.append(f)
    if not fits:
        raise ValueError("no group could be fitted: " + "; ".join(errors))
    if skipped is not None:
        skipped += errors
    return fits
