"""The figures researchers look at, from collected runs (seaborn; each written as PNG and PDF).

Every ``plot_*`` returns the written paths, or raises :class:`NoData` naming what the runs did not log.
Curves aggregate seeds (line = mean, band = ± 1 sd); one panel per model when there are several models.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from harness.run.metrics import COMPLETED, ENTROPY, EVAL_PREFIX, REWARD_MEAN, method_rank  # noqa: E402

from .collect import Collection  # noqa: E402
from .fit import fit_groups, fit_size_trend  # noqa: E402
from .points import run_points, score_series  # noqa: E402

COV_GROUPS = [
    ("cov/top_0.02pct", "top 0.02%"),
    ("cov/top_0.2pct", "top 0.2%"),
    ("cov/top_2pct", "top 2%"),
    ("cov/top_20pct", "top 20%"),
    ("cov/top_50pct", "top 50%"),
    ("cov/mean", "all"),
]


class NoData(ValueError):
    """The runs did not log what a figure needs."""


def method_palette(labels) -> tuple[list[str], dict]:
    """The same colour for a method in every figure, methods in the paper's order."""

    def key(m):
        base = str(m).split("+")[0].split("(")[0]
        return (method_rank(base), str(m))

    order = sorted(set(labels), key=key)
    colors = sns.color_palette("tab10" if len(order) <= 10 else "husl", len(order))
    return order, dict(zip(order, colors))


def _save(fig, out_dir: Path, name: str, formats=("png", "pdf")) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        p = out_dir / f"{name}.{ext}"
        tmp = out_dir / f".{name}.{ext}.tmp"
        fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight")
        os.replace(tmp, p)  # an interrupted run never leaves a half-written figure
        paths.append(p)
    plt.close(fig)
    return paths


def _completed(col: Collection, include_incomplete: bool) -> pd.DataFrame:
    m = col.metrics
    return m if include_incomplete else m[m["status"] == COMPLETED]


def _curve(m: pd.DataFrame, key: str, ylabel: str, title: str, out_dir: Path, name: str, formats) -> list[Path]:
    if key not in m.columns or m[key].notna().sum() == 0:
        raise NoData(f"{name}: no run logged {key!r}")
    d = m.dropna(subset=[key]).rename(columns={"label": "method"})
    n_models = d["model"].nunique()
    order, palette = method_palette(d["method"])
    g = sns.relplot(
        data=d,
        x="step",
        y=key,
        hue="method",
        hue_order=order,
        palette=palette,
        kind="line",
        errorbar="sd",
        col="model" if n_models > 1 else None,
        height=3.6,
        aspect=1.35,
        facet_kws={"sharey": False},
    )
    g.set_axis_labels("training step", ylabel)
    g.figure.suptitle(title, y=1.03)
    return _save(g.figure, out_dir, name, formats)


def plot_entropy(col, out_dir, include_incomplete=False, formats=("png", "pdf")):
    return _curve(
        _completed(col, include_incomplete),
        ENTROPY,
        "policy entropy (nats/token)",
        "Entropy vs step per method",
        Path(out_dir),
        "entropy_vs_step",
        formats,
    )


def plot_reward(col, out_dir, include_incomplete=False, formats=("png", "pdf")):
    return _curve(
        _completed(col, include_incomplete),
        REWARD_MEAN,
        "training reward (mean)",
        "Reward vs step per method",
        Path(out_dir),
        "reward_vs_step",
        formats,
    )


def plot_score(col, out_dir, score_key, include_incomplete=False, formats=("png", "pdf")):
    """The validation score over training, including the eval before the first update (step 0)."""
    if not score_key.startswith(EVAL_PREFIX):
        raise NoData(f"score_vs_step: score key {score_key!r} is not a validation score")
    s = score_series(col, score_key, include_incomplete).rename(columns={"score": score_key})
    return _curve(s, score_key, score_key, "Validation score vs step", Path(out_dir), "score_vs_step", formats)


def plot_law(col, out_dir, score_key, include_incomplete=False, formats=("png", "pdf")):
    """Score against entropy, one colour per model size, with R = -a·exp(H) + b fitted per model."""
    pts = run_points(col, score_key, include_incomplete=include_incomplete)
    if pts.empty:
        raise NoData(f"score_vs_entropy: no step logged both 'entropy' and {score_key!r}")
    fits = fit_groups(pts, by="model")
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    order = pts.groupby("model")["model_params"].max().sort_values(na_position="last").index.tolist()
    palette = dict(zip(order, sns.color_palette("viridis", len(order))))
    sns.scatterplot(
        data=pts,
        x="entropy",
        y="score",
        hue="model",
        hue_order=order,
        palette=palette,
        s=14,
        alpha=0.55,
        ax=ax,
        linewidth=0,
        legend=False,
    )
    for f in fits:
        grp = pts[pts["model"] == f.label]
        hs = np.linspace(0, grp["entropy"].max() * 1.02, 200)
        ax.plot(
            hs,
            f.predict(hs),
            color=palette[f.label],
            lw=1.8,
            label=f"{f.label}: a={f.a:.3g}, b={f.b:.3g}, R²={f.r2:.2f}",
        )
    ax.set_xlabel("policy entropy H")
    ax.set_ylabel(score_key)
    ax.set_title("Score vs entropy with fitted R = −a·exp(H) + b")
    ax.legend(fontsize=7, loc="best")
    return _save(fig, Path(out_dir), "score_vs_entropy", formats)


def plot_cov_distribution(col, out_dir, include_incomplete=False, formats=("png", "pdf")):
    """Mean token covariance of the top-x% groups at the first logged step (the paper's Table 1 view)."""
    m = _completed(col, include_incomplete)
    keys = [(k, lab) for k, lab in COV_GROUPS if k in m.columns and m[k].notna().any()]
    if not keys:
        raise NoData("cov_distribution: no run logged cov/top_*pct or cov/mean")
    first = m.dropna(subset=[k for k, _ in keys], how="all")
    first = first[first["step"] == first.groupby("run_dir")["step"].transform("min")]
    long = first.melt(id_vars=["label"], value_vars=[k for k, _ in keys], var_name="group", value_name="cov")
    long["group"] = long["group"].map(dict(keys))
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    hue_order, palette = method_palette(long["label"])
    sns.barplot(
        data=long.rename(columns={"label": "method"}),
        x="group",
        y="cov",
        hue="method",
        order=[lab for _, lab in keys],
        hue_order=hue_order,
        palette=palette,
        errorbar="sd",
        ax=ax,
    )
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("tokens ranked by covariance (A − Ā)(log π − mean log π)")
    ax.set_ylabel("mean covariance (symlog)")
    ax.set_title("Token covariance distribution at the first step")
    return _save(fig, Path(out_dir), "cov_distribution", formats)


def entropy_change_pairs(m: pd.DataFrame, entropy_key: str = ENTROPY, delta_key: str | None = None) -> pd.DataFrame:
    """Pair each step's covariance term with the entropy change its update caused (column ``delta_h``).

    With ``delta_key`` (``entropy/update_delta``: the trained batch re-measured after the step's updates) the change
    is that of the same states, the update's effect alone. Without it: H[t+1] - H[t] of ``entropy_key``, since the
    entropy at step t is measured on step t's rollout, before step t's update; only consecutive steps are paired
    (this difference also carries the change of prompts between the two rollouts)."""
    need = {"cov/term", delta_key or entropy_key}
    if not need <= set(m.columns):
        raise NoData(f"entropy_change_vs_cov: runs did not log {sorted(need - set(m.columns))}")
    if delta_key:
        pairs = m.assign(delta_h=m[delta_key]).dropna(subset=["cov/term", "delta_h"])
    else:
        out = []
        for _, grp in m.sort_values("step").groupby("run_dir"):
            nxt = grp[entropy_key].shift(-1)
            consecutive = grp["step"].shift(-1) == grp["step"] + 1
            out.append(grp.assign(delta_h=(nxt - grp[entropy_key]).where(consecutive)))
        pairs = pd.concat(out).dropna(subset=["cov/term", "delta_h"])
    if len(pairs) < 3:
        raise NoData("entropy_change_vs_cov: fewer than 3 steps with both cov/term and an entropy change")
    return pairs


def pearson_r(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def plot_entropy_change(
    col,
    out_dir,
    include_incomplete=False,
    formats=("png", "pdf"),
    entropy_key=ENTROPY,
    delta_key=None,
    name="entropy_change_vs_cov",
):
    """Theorem 1 check: the entropy decrease -ΔH against the covariance term, with Pearson r (ΔH: see
    ``entropy_change_pairs``)."""
    pairs = entropy_change_pairs(_completed(col, include_incomplete), entropy_key, delta_key)
    pairs = pairs.assign(neg_delta_h=-pairs["delta_h"]).rename(columns={"label": "method"})
    r_all = pearson_r(pairs["cov/term"], pairs["neg_delta_h"])
    names = {m: f"{m} (r={pearson_r(g['cov/term'], g['neg_delta_h']):.2f})" for m, g in pairs.groupby("method")}
    order, palette = method_palette(pairs["method"])
    pairs["method"] = pairs["method"].map(names)
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    sns.scatterplot(
        data=pairs,
        x="cov/term",
        y="neg_delta_h",
        hue="method",
        hue_order=[names[m] for m in order],
        palette={names[m]: c for m, c in palette.items()},
        s=14,
        alpha=0.6,
        linewidth=0,
        ax=ax,
    )
    ax.axhline(0, color="0.6", lw=0.8)
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set_xlabel("covariance term of the step" if delta_key else "covariance term at step t")
    ax.set_ylabel("−ΔH of the update, same batch" if delta_key else f"−ΔH = H[t] − H[t+1] ({entropy_key})")
    ax.set_title(f"−ΔH vs covariance: r = {r_all:.2f} over {len(pairs)} steps (Theorem 1: r > 0)", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, Path(out_dir), name, formats)


def plot_size_scaling(col, out_dir, score_key, include_incomplete=False, formats=("png", "pdf")):
    """a and b of each model's law against model size (log axis), with the log-linear fit."""
    pts = run_points(col, score_key, include_incomplete=include_incomplete)
    fits = [f for f in fit_groups(pts, by="model") if f.model_params]
    if len({f.model_params for f in fits}) < 2:
        raise NoData("size_scaling: needs law fits for at least two model sizes (model_params in result.json)")
    trend = fit_size_trend([f.model_params for f in fits], [f.a for f in fits], [f.b for f in fits])
    sizes = np.array([f.model_params for f in fits])
    grid = np.logspace(np.log10(sizes.min()), np.log10(sizes.max()), 50)
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4))
    for ax, name, slope, icpt, r2 in (
        (axes[0], "a", trend.a_slope, trend.a_intercept, trend.a_r2),
        (axes[1], "b", trend.b_slope, trend.b_intercept, trend.b_r2),
    ):
        ax.scatter(sizes, [getattr(f, name) for f in fits], color="C0", zorder=3)
        for f in fits:
            ax.annotate(
                f.label, (f.model_params, getattr(f, name)), fontsize=7, xytext=(3, 3), textcoords="offset points"
            )
        ax.plot(
            grid,
            slope * np.log10(grid) + icpt,
            color="C1",
            label=f"{name} = {slope:.3g}·log10(N) {'+' if icpt >= 0 else '−'} {abs(icpt):.3g}\n"
            + (f"R² = {r2:.2f}" if trend.n_sizes > 2 else "2 sizes: a line through 2 points"),
        )
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("model parameters N")
        ax.set_ylabel(name)
        ax.legend(fontsize=7)
    fig.suptitle("Entropy-law coefficients against model size")
    fig.tight_layout()
    return _save(fig, Path(out_dir), "size_scaling", formats)


def plot_all(
    col: Collection, out_dir, score_key: str, include_incomplete=False, formats=("png", "pdf"), which=None
) -> tuple[list[Path], list[str]]:
    """Every figure the runs have data for; returns (written paths, reasons for the skipped ones)."""
    jobs = {
        "entropy_vs_step": lambda: plot_entropy(col, out_dir, include_incomplete, formats),
        "reward_vs_step": lambda: plot_reward(col, out_dir, include_incomplete, formats),
        "score_vs_step": lambda: plot_score(col, out_dir, score_key, include_incomplete, formats),
        "score_vs_entropy": lambda: plot_law(col, out_dir, score_key, include_incomplete, formats),
        "cov_distribution": lambda: plot_cov_distribution(col, out_dir, include_incomplete, formats),
        "entropy_change_vs_cov": lambda: plot_entropy_change(col, out_dir, include_incomplete, formats),
        "size_scaling": lambda: plot_size_scaling(col, out_dir, score_key, include_incomplete, formats),
    }
    written, skipped = [], []
    for name in which or jobs:
        if name not in jobs:
            raise ValueError(f"unknown figure {name!r}; known: {', '.join(jobs)}")
        try:
            written += jobs[name]()
        except NoData as e:
            skipped.append(str(e))
        except ValueError as e:  # e.g. no group has enough points for a law fit
            skipped.append(f"{name}: {e}")
    return written, skipped


FIGURES = [
    "entropy_vs_step",
    "reward_vs_step",
    "score_vs_step",
    "score_vs_entropy",
    "cov_distribution",
    "entropy_change_vs_cov",
    "size_scaling",
]
