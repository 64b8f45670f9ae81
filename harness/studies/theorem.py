"""The theorem ladder (sweeps/mechanism_theorem.yaml): each covariance form against the measured entropy change of
one update, per optimizer and learning rate.

    python -m harness.studies.theorem RUNS_DIR --out results/mechanism/theorem

RUNS_DIR holds run directories (or ``*.tar.xz`` archives of them, harness.results.archive) that log
``entropy/update_delta`` (ΔH: the trained batch re-measured after the step's single update) and the forms
``cov/term`` (natural-gradient form, Cov(log π, A)), ``cov/vanilla`` (plain-gradient form, one-sample
Cov(log π, π·A)) and ``cov/first_order`` (−Cov(log π, z' − z) from the logits: the exact first-order change).
Per run: Pearson r and OLS slope of ΔH on each form over its steps, the median per-step |ΔH| / H (the step size
the theorem is first order in) and the mean ΔH / H. Per cell (optimizer, lr): r summarised over runs on Fisher's
z with a t interval, slopes with a t interval.

Verdicts (docs/mechanism_prereg.md), at the smallest learning rate of each optimizer (the first-order rung), one
Holm family ``theorem`` over all of them: ``first_order`` (r > 0, and r > 0.9: the measured ΔH is the first-order
change), ``natural_form`` (r(cov/term, ΔH) < 0), ``plain_form`` (r(cov/vanilla, ΔH) < 0). The other rungs are
reported, not decided: they show how r changes as the step leaves the first-order regime.
Output ``theorem.json``: ``{"cells": [{"optimizer", "lr", "n_runs", "median_rel_step", "mean_rel_delta_h",
"forms": {FORM: {"r": BD, "slope": IV}}}], "runs": [...], "verdicts": {...}}`` (BD, IV as in mechanism.json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

from harness.results import stats
from harness.studies.verdicts import Check, Claim, decide, verdict_markdown

FORMS = ("cov/first_order", "cov/term", "cov/vanilla")
DELTA = "entropy/update_delta"
FIRST_ORDER_BAR = 0.9
OPTIMIZER_ORDER = ("sgd", "adamw_b1_0", "adamw")


def _setting(settings: str, key: str, default):
    return json.loads(settings or "{}").get(key, default)


def per_run(col) -> list[dict]:
    """One record per completed run: optimizer, lr, seed, per-form r and slope, step sizes."""
    from harness.results.fit import ols_line
    from harness.results.plots import pearson_r

    out = []
    m = col.metrics
    if DELTA not in m.columns:
        return out
    for r in col.completed.itertuples():
        g = m[m["run_dir"] == r.run_dir].dropna(subset=[DELTA])
        if len(g) < 3:
            continue
        dh = g[DELTA].to_numpy(float)
        h = g["entropy"].to_numpy(float)
        rec = {
            "optimizer": _setting(r.settings, "train.optimizer", "adamw"),
            "lr": float(_setting(r.settings, "train.lr", math.nan)),
            "seed": int(r.seed),
            "model": r.model,
            "steps": int(len(g)),
            "median_rel_step": float(np.median(np.abs(dh) / h)),
            "mean_rel_delta_h": float(np.mean(dh / h)),
            "forms": {},
        }
        for form in FORMS:
            if form not in g or g[form].isna().any():
                continue
            x = g[form].to_numpy(float)
            ok = x.std() > 0 and dh.std() > 0
            rec["forms"][form] = {"r": pearson_r(x, dh) if ok else None, "slope": ols_line(x, dh)[0] if ok else None}
        out.append(rec)
    return out


def _cells(runs: list[dict]) -> list[dict]:
    keys = sorted(
        {(r["optimizer"], r["lr"]) for r in runs},
        key=lambda k: (OPTIMIZER_ORDER.index(k[0]) if k[0] in OPTIMIZER_ORDER else 99, k[0], k[1]),
    )
    cells = []
    for opt, lr in keys:
        rs = [r for r in runs if (r["optimizer"], r["lr"]) == (opt, lr)]
        forms = {}
        for form in FORMS:
            vals = [r["forms"][form] for r in rs if form in r["forms"] and r["forms"][form]["r"] is not None]
            if vals:
                forms[form] = {
                    "r": stats.fisher_z_ci([v["r"] for v in vals]).to_dict(),
                    "slope": stats.mean_ci([v["slope"] for v in vals]).to_dict(),
                }
        cells.append(
            {
                "optimizer": opt,
                "lr": lr,
                "n_runs": len(rs),
                "median_rel_step": stats.mean_ci([r["median_rel_step"] for r in rs]).to_dict(),
                "mean_rel_delta_h": stats.mean_ci([r["mean_rel_delta_h"] for r in rs]).to_dict(),
                "forms": forms,
            }
        )
    return cells


def _claims(runs: list[dict]) -> list[Claim]:
    claims = []
    for opt in sorted(
        {r["optimizer"] for r in runs}, key=lambda o: OPTIMIZER_ORDER.index(o) if o in OPTIMIZER_ORDER else 99
    ):
        lr = min(r["lr"] for r in runs if r["optimizer"] == opt)
        rs = [r for r in runs if r["optimizer"] == opt and r["lr"] == lr]
        cell = f"{opt} lr {lr:g}"
        step = np.median([r["median_rel_step"] for r in rs])

        def rvals(form, rs=rs):
            return [r["forms"][form]["r"] for r in rs if form in r["forms"] and r["forms"][form]["r"] is not None]

        fo = rvals("cov/first_order")
        c = Claim("first_order", cell, "theorem", "ΔH is the first-order change −Cov(log π, Δz) (measurement check)")
        c.tests = [
            Check.of("r(cov/first_order, ΔH) > 0", "qualitative", "above", stats.fisher_z_ci(fo), "r"),
            Check.of(
                f"r(cov/first_order, ΔH) > {FIRST_ORDER_BAR}",
                "quantitative",
                "above",
                stats.fisher_z_ci(fo, FIRST_ORDER_BAR),
                "r",
            ),
        ]
        c.headline = f"median per-step |ΔH|/H {step:.2g}; lowest per-run r {min(fo):.4f}" if fo else ""
        claims.append(c)
        for claim, form, words in (
            ("natural_form", "cov/term", "natural-gradient form Cov(log π, A)"),
            ("plain_form", "cov/vanilla", "plain-gradient form Cov(log π, π·A)"),
        ):
            c = Claim(claim, cell, "theorem", f"ΔH ≈ −η·Cov, {words}: r < 0")
            b = stats.fisher_z_ci(rvals(form))
            c.tests = [Check.of(f"r({form}, ΔH) < 0", "qualitative", "below", b, "r")]
            c.headline = f"r {b.estimate:+.2f}; median |ΔH|/H {step:.2g}"
            claims.append(c)
    return claims


def analyse_theorem(col) -> dict:
    runs = per_run(col)
    if not runs:
        raise ValueError(f"no completed run logs {DELTA} (train.entropy_after_update: true) on 3 or more steps")
    runs.sort(key=lambda r: (r["optimizer"], r["lr"], r["seed"]))
    return {
        "delta_key": DELTA,
        "forms": list(FORMS),
        "cells": _cells(runs),
        "runs": runs,
        "verdicts": decide(_claims(runs)),
    }


def markdown(res: dict, source: str) -> str:
    f = lambda v, s="{:+.2f}": "—" if v is None else s.format(v)  # noqa: E731
    out = [
        f"# Theorem ladder: {source}",
        "",
        f"Regenerate: `python -m harness.studies.theorem {source} --out DIR`. ΔH = `{res['delta_key']}` "
        "(the trained batch re-measured after the step's one update). Per cell: r of ΔH with each form, per run, "
        "then the mean on Fisher's z with its 95% t interval over runs; slope: OLS slope of ΔH on the form, mean "
        "± 95% t CI over runs; step: median per-step |ΔH|/H (mean over runs).",
        "",
        verdict_markdown([("Verdicts at the first-order rung", res["verdicts"])]),
        "",
        "| optimizer | lr | runs | step |ΔH|/H | mean ΔH/H | r first_order | r term | r vanilla | slope first_order | "
        "slope term | slope vanilla |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["cells"]:
        fm = c["forms"]
        rtxt = [
            f"{f(fm[k]['r']['estimate'])} [{f(fm[k]['r']['lo'])}, {f(fm[k]['r']['hi'])}]" if k in fm else "—"
            for k in FORMS
        ]
        stxt = [
            f"{f(fm[k]['slope']['mean'], '{:.3g}')} ± {f(fm[k]['slope']['ci95'], '{:.2g}')}" if k in fm else "—"
            for k in FORMS
        ]
        out.append(
            f"| {c['optimizer']} | {c['lr']:g} | {c['n_runs']} | {f(c['median_rel_step']['mean'], '{:.2g}')} | "
            f"{f(c['mean_rel_delta_h']['mean'], '{:+.2g}')} | " + " | ".join(rtxt + stxt) + " |"
        )
    return "\n".join(out) + "\n"


def write_theorem(runs_dir, out_dir) -> list[Path]:
    from harness.results.archive import unpacked
    from harness.results.collect import collect

    with unpacked(runs_dir) as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyse_theorem(collect([folder]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "theorem.json", out_dir / "theorem.md"
    js.write_text(json.dumps(stats_clean(res), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    md.write_text(markdown(res, str(runs_dir)), encoding="utf-8")
    return [js, md]


def stats_clean(obj):
    if isinstance(obj, dict):
        return {k: stats_clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [stats_clean(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.studies.theorem", description=__doc__.split("\n")[0])
    p.add_argument("runs_dir")
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    try:
        if not Path(a.runs_dir).is_dir():
            raise FileNotFoundError(f"no such runs directory: {a.runs_dir}")
        for path in write_theorem(a.runs_dir, a.out):
            print(path)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
