"""Figures of ``harness mechanism``: entropy per size, the law per size, ΔH vs covariance, the rescue."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.results.plots import NoData, _save, method_palette, plot_entropy_change, plt
from harness.run.metrics import COMPLETED


def _panels(n: int):
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    return fig, axes[0]


def plot_mechanism(col, res: dict, out_dir: Path, formats=("png",)) -> list[Path]:
    written: list[Path] = []
    sizes = list(res["sizes"])
    m = col.metrics[col.metrics["status"] == COMPLETED]
    order, palette = method_palette(m["label"].astype(str))
    fig, axes = _panels(len(sizes))
    for ax, size in zip(axes, sizes):
        g = m[m["model"] == size]
        for lab in order:
            c = g[g["label"] == lab].groupby("step")[res["entropy_key"]].agg(["mean", "std"])
            if c.empty:
                continue
            ax.plot(c.index, c["mean"], color=palette[lab], lw=1.2, label=lab)
        r = res["sizes"][size]["grpo_entropy_ratio"]["mean"]
        ax.set_title(f"{size}: GRPO end/start entropy {r:.2f}" if r is not None else size, fontsize=9)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(f"{res['entropy_key']} (mean over seeds, log scale)")
    axes[0].legend(fontsize=7)
    written += _save(fig, out_dir, "mechanism_entropy", formats)

    from harness.results.points import run_points

    pts = run_points(col, res["score_key"], res["entropy_key"])
    fig, axes = _panels(len(sizes))
    for ax, size in zip(axes, sizes):
        p = pts[(pts["model"] == size) & pts["label"].isin(res["law_family"])]
        for lab, g in p.groupby("label"):
            ax.scatter(g["entropy"], g["score"], s=8, alpha=0.5, color=palette.get(lab), label=lab)
        law = res["sizes"][size]["law"]
        if law and len(p):
            h = np.linspace(p["entropy"].min(), p["entropy"].max(), 50)
            ax.plot(h, -law["a"] * np.exp(h) + law["b"], color="k", lw=1)
            ax.set_title(f"{size}: a={law['a']:.2f} b={law['b']:.2f} R²={law['r2']:.2f}", fontsize=9)
        ax.set_xlabel(f"entropy H ({res['entropy_key']})")
        ax.set_ylabel(res["score_key"])
    axes[0].legend(fontsize=7)
    written += _save(fig, out_dir, "mechanism_law", formats)

    try:
        written += plot_entropy_change(
            col,
            out_dir,
            formats=formats,
            entropy_key=res["entropy_key"],
            delta_key=res["delta_key"],
            name="mechanism_cov",
        )
    except NoData:
        pass

    from harness.run.metrics import METHOD_ORDER

    methods = [m for m in METHOD_ORDER if m in res["methods"]] + sorted(set(res["methods"]) - set(METHOD_ORDER))
    if methods:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        width = 0.8 / max(len(sizes), 1)
        for k, (key, title) in enumerate(
            [
                ("entropy_end_vs_grpo", "end entropy ÷ GRPO's (paired, geometric mean, 95% CI)"),
                ("score_delta_vs_grpo", "final score − GRPO's (paired, 95% CI)"),
            ]
        ):
            ax = axes[k]
            for j, size in enumerate(sizes):
                cells = [res["methods"][mm].get(size) or {} for mm in methods]
                if k == 0 and all("entropy_end_vs_grpo_log" in c for c in cells):  # asymmetric: log-scale interval
                    d = [c["entropy_end_vs_grpo_log"] for c in cells]
                    mean = [v["estimate"] for v in d]
                    err = [
                        [m - v["lo"] if None not in (m, v["lo"]) else 0 for m, v in zip(mean, d)],
                        [v["hi"] - m if None not in (m, v["hi"]) else 0 for m, v in zip(mean, d)],
                    ]
                else:
                    mean = [c.get(key, {}).get("mean") for c in cells]
                    err = [c.get(key, {}).get("ci95") or 0 for c in cells]
                x = np.arange(len(methods)) + j * width
                ax.bar(x, [v if v is not None else np.nan for v in mean], width, yerr=err, capsize=2, label=size)
            ax.axhline(1.0 if k == 0 else 0.0, color="0.4", lw=0.8)
            ax.set_xticks(np.arange(len(methods)) + 0.4 - width / 2, methods, rotation=30, fontsize=8)
            ax.set_title(title, fontsize=9)
        axes[0].legend(fontsize=7)
        written += _save(fig, out_dir, "mechanism_rescue", formats)
    return written
