"""``harness table``, ``harness plot`` and ``harness fit``."""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

from harness.run.metrics import ENTROPY, EVAL_PREFIX

FORMATS = ("csv", "html", "md", "tex")  # = harness.results.table.FORMATS (tests/results pins it); no pandas at --help


def register(sub) -> None:
    t = sub.add_parser(
        "table",
        help="leaderboard of runs (mean ± 95%% CI over seeds), optionally beside the paper or lm-eval scores",
        description="Rows (model, method), columns = suites, in percent: mean ± half-width of the 95% Student-t "
        "interval over seeds; two averages and Δ vs a baseline. With no RUNS and --reference paper, prints the "
        "paper's Table 2; --import-lm-eval adds models scored by lm-eval as rows of their own.",
    )
    t.add_argument("runs", nargs="*", help="run directories or folders holding them")
    t.add_argument("--format", default="md", choices=sorted(FORMATS), help="output format (default md)")
    t.add_argument("--baseline", default=None, help="method the Δ columns compare with (default: grpo if present)")
    t.add_argument("--reference", choices=["paper"], default=None, help="add the paper's Table 2, marked reference")
    t.add_argument(
        "--allow-mixed-protocols",
        action="store_true",
        help="show a suite evaluated under several protocols as one column per protocol (flagged)",
    )
    t.add_argument(
        "--allow-mixed-data",
        action="store_true",
        help="pool runs of one row even when their provenance shows different data (flagged)",
    )
    t.add_argument(
        "--provenance",
        action="store_true",
        help="add a column: short git commit(s) (+dirty) and data hash of each row's runs",
    )
    t.add_argument(
        "--import-lm-eval",
        action="append",
        type=Path,
        default=None,
        metavar="FILE",
        help="add a model scored by lm-eval (its results JSON: lm_eval --output_path, or harness eval "
        "--lm-eval-tasks) as a row of its own, its protocol in the notes; never pooled with runs (repeatable)",
    )
    t.add_argument("--out", type=Path, default=None, help="write to this file instead of stdout")
    t.set_defaults(func=cmd_table)

    p = sub.add_parser("plot", help="standard figures (PNG and PDF) from runs")
    p.add_argument("runs", nargs="+", help="run directories or folders holding them")
    p.add_argument("--out", type=Path, required=True, help="folder for the figures")
    p.add_argument(
        "--score-key",
        default="auto",
        help="score for score-vs-step/entropy: auto (eval/<suite>/<metric> if logged, else reward/mean) "
        "or any metrics.jsonl key",
    )
    p.add_argument("--only", action="append", default=None, help="make only this figure (repeatable)")
    p.add_argument("--formats", default="png,pdf", help="comma-separated image formats (default png,pdf)")
    p.add_argument("--include-incomplete", action="store_true", help="also plot runs without result.json")
    p.set_defaults(func=cmd_plot)

    r = sub.add_parser(
        "report",
        help="leaderboard.{md,csv}, standard figures and law fits for a sweep's runs",
        description="What `harness sweep --results-dir` writes after a sweep, from existing runs.",
    )
    r.add_argument("runs_dir", help="folder holding the run directories (e.g. runs/quickstart)")
    r.add_argument("--out", type=Path, required=True, help="output folder (e.g. results/quickstart)")
    r.add_argument("--score-key", default="auto", help="score for the law and score figures (default auto)")
    r.add_argument("--formats", default="png,pdf", help="comma-separated image formats (default png,pdf)")
    r.add_argument("--reference", choices=["paper"], default=None, help="add the paper's Table 2 to the leaderboard")
    r.set_defaults(func=cmd_report)

    mc = sub.add_parser(
        "mechanism",
        help="the paper's entropy-mechanism analyses: mechanism.json + figures",
        description="Early consumption, the law per size (pooled and per algorithm), prediction "
        "from the first third, ΔH vs covariance, and the rescue (paired 95% CIs vs "
        "the baseline). Definitions: harness/studies/mechanism.py, docs/mechanism.md.",
    )
    mc.add_argument("runs_dir", help="folder holding the run directories of one sweep (e.g. runs/mechanism)")
    mc.add_argument("--out", type=Path, required=True, help="output folder (e.g. results/mechanism)")
    mc.add_argument("--score-key", default="auto", help="held-out score key (default auto: eval/<suite>/<metric>)")
    mc.add_argument("--baseline", default="grpo", help="method the others are compared with (default grpo)")
    mc.add_argument("--formats", default="png", help="comma-separated image formats (default png)")
    mc.add_argument(
        "--law-family",
        default=None,
        help="comma-separated methods pooled for the law fits (default: those of grpo,rloo,prime present)",
    )
    mc.add_argument(
        "--entropy-key",
        default="auto",
        help="metrics key used as the entropy H (default auto: entropy/generated when every run logs it, "
        "the entropy of all generated responses before dynamic filtering; else entropy)",
    )
    mc.set_defaults(func=cmd_mechanism)

    f = sub.add_parser(
        "fit",
        help="fit the entropy law R = -a·exp(H) + b",
        description="Fits a, b (R², ceiling -a+b) per run or model from RUNS, or from exported "
        "CSV logs. --fit-fraction F fits on the first F of the points (step order) "
        "and reports the prediction error on the rest (rmse_heldout).",
    )
    f.add_argument("runs", nargs="*", help="run directories or folders holding them")
    f.add_argument(
        "--csv",
        action="append",
        type=Path,
        default=None,
        help="exported log CSV (W&B, TensorBoard); repeat to merge files on their step column",
    )
    f.add_argument("--entropy-col", help="entropy column of the CSV")
    f.add_argument("--score-col", help="score column of the CSV")
    f.add_argument("--step-col", default=None, help="step column of the CSV (default: step/Step/_step/global_step)")
    f.add_argument(
        "--score-key",
        default="auto",
        help="runs: score key, auto (eval/<suite>/<metric> if logged, else reward/mean) or any key",
    )
    f.add_argument("--entropy-key", default=ENTROPY, help="runs: entropy key in metrics.jsonl")
    f.add_argument("--by", choices=["run", "model"], default="run", help="runs: one fit per run or per model")
    f.add_argument("--fit-fraction", type=float, default=None, help="fit on the first F (0<F<1) of the points")
    f.add_argument(
        "--predict-size",
        type=float,
        action="append",
        default=None,
        help="extrapolate a, b, ceiling to this many parameters (needs fits of ≥2 model sizes)",
    )
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(func=cmd_fit)


def _collect(runs):
    from harness.results.collect import collect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        col = collect(runs)
    for w in col.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return col


def cmd_table(args) -> int:
    from harness.results.table import build_leaderboard, render

    if not args.runs and not args.reference and not args.import_lm_eval:
        raise ValueError(
            "give run directories, --reference paper to print the paper's Table 2, or --import-lm-eval FILE"
        )
    if args.out:
        from harness.io import check_output_file

        check_output_file(args.out, "--out")
    col = _collect(args.runs) if args.runs else None
    lb = build_leaderboard(
        col,
        baseline=args.baseline,
        reference=args.reference,
        allow_mixed_protocols=args.allow_mixed_protocols,
        allow_mixed_data=args.allow_mixed_data,
        provenance=args.provenance,
        imports=args.import_lm_eval,
    )
    text = render(lb, args.format)
    if args.out:
        from harness.results.report import _write

        _write(args.out, text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in formats if x not in ("png", "pdf", "svg")]
    if bad or not formats:
        raise ValueError(f"--formats {text!r}: allowed png, pdf, svg")
    return formats


def cmd_report(args) -> int:
    from harness.io import check_output_dir
    from harness.results.report import write_sweep_report
    from harness.run.rundir import check_placement

    if not Path(args.runs_dir).is_dir():
        raise FileNotFoundError(f"no such runs directory: {args.runs_dir}")
    check_output_dir(args.out, "--out")
    check_placement(args.out, "report")
    _collect([args.runs_dir])  # the files it cannot read are named here (the report keeps them in its notes)
    for p in write_sweep_report(args.runs_dir, args.out, args.score_key, _formats(args.formats), args.reference):
        print(p)
    return 0


def cmd_mechanism(args) -> int:
    from harness.studies.mechanism import write_mechanism

    if not Path(args.runs_dir).is_dir():
        raise FileNotFoundError(f"no such runs directory: {args.runs_dir}")
    family = None if args.law_family is None else tuple(x.strip() for x in args.law_family.split(",") if x.strip())
    if family is not None and not family:
        raise ValueError("--law-family: give at least one method, e.g. grpo,rloo,prime")
    from harness.results.archive import archives

    if not archives(args.runs_dir):  # a folder of run archives is read (and warned about) inside write_mechanism
        _collect([args.runs_dir])  # the files it cannot read are named here
    for p in write_mechanism(
        args.runs_dir, args.out, args.score_key, args.baseline, _formats(args.formats), family, args.entropy_key
    ):
        print(p)
    return 0


def cmd_plot(args) -> int:
    from harness.io import check_output_dir
    from harness.results.plots import FIGURES, plot_all
    from harness.results.points import resolve_score_key

    formats = _formats(args.formats)
    check_output_dir(args.out, "--out")
    if args.only:
        unknown = [o for o in args.only if o not in FIGURES]
        if unknown:
            raise ValueError(f"unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}")
    col = _collect(args.runs)
    if col.completed.empty and not args.include_incomplete:
        raise ValueError("no completed run (result.json) to plot; pass --include-incomplete to plot partial runs")
    key = resolve_score_key(col, args.score_key)
    written, skipped = plot_all(col, args.out, key, args.include_incomplete, formats, args.only)
    for p in written:
        print(p)
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    return 0 if written else 1


def _clean(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def cmd_fit(args) -> int:
    from harness.results.fit import fit_entropy_law, fit_groups, fit_size_trend

    if bool(args.runs) == bool(args.csv):
        raise ValueError("give either run directories or --csv FILE (with --entropy-col and --score-col)")
    fits, pooled, trend, source, skipped = [], None, None, {}, []
    if args.csv:
        if not args.entropy_col or not args.score_col:
            raise ValueError("--csv needs --entropy-col and --score-col")
        from harness.results.points import csv_points

        for p in args.csv:  # name the file that cannot be read (pandas' own errors name none)
            _check_csv(p)
        try:
            pts = csv_points(args.csv, args.entropy_col, args.score_col, args.step_col)
        except (pd_errors().ParserError, pd_errors().EmptyDataError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"--csv {', '.join(map(str, args.csv))}: not a readable CSV ({first})") from None
        dropped = pts.attrs.get("dropped_steps") or []
        if dropped:  # steps logged without both values (an eval every k steps, a failed export): said, not hidden
            shown = ", ".join(str(s) for s in dropped[:8]) + (" ..." if len(dropped) > 8 else "")
            print(
                f"note: {len(dropped)} of {len(dropped) + len(pts)} rows have no number for {args.entropy_col!r} "
                f"or {args.score_col!r} and are left out of the fit (steps {shown})",
                file=sys.stderr,
            )
        try:
            pooled = fit_entropy_law(pts["entropy"], pts["score"], args.fit_fraction, label=str(args.csv[0]))
        except ValueError as e:
            raise ValueError(f"--csv {', '.join(map(str, args.csv))}: {e}") from None
        source = {"csv": [str(p) for p in args.csv], "entropy_col": args.entropy_col, "score_col": args.score_col}
    else:
        from harness.results.points import resolve_score_key, run_points

        col = _collect(args.runs)
        key = resolve_score_key(col, args.score_key)
        pts = run_points(col, key, args.entropy_key)
        if pts.empty:
            raise ValueError(f"no completed run logged both {args.entropy_key!r} and {key!r} on the same step")
        try:
            fits = fit_groups(pts, args.by, args.fit_fraction, skipped)
        except ValueError as e:
            hint = (
                (
                    f" (the score is {key!r}, logged on eval steps only; --score-key reward/mean uses every step, "
                    "--by model pools the runs of a model)"
                )
                if key.startswith(EVAL_PREFIX)
                else ""
            )
            raise ValueError(f"{e}{hint}") from None
        pooled_pts = pts.sort_values(["step", "run_dir"])
        pooled = fit_entropy_law(pooled_pts["entropy"], pooled_pts["score"], args.fit_fraction, label="all runs")
        source = {"runs": [str(r) for r in args.runs], "score_key": key, "entropy_key": args.entropy_key, "by": args.by}
        by_model = fit_groups(pts, "model") if args.by == "run" else fits
        sized = [f for f in by_model if f.model_params]
        if len({f.model_params for f in sized}) >= 2:
            trend = fit_size_trend([f.model_params for f in sized], [f.a for f in sized], [f.b for f in sized])
    if args.predict_size and trend is None:
        raise ValueError("--predict-size needs law fits for at least two model sizes (model_params in result.json)")
    out = {**pooled.to_dict(), **source, "fits": [f.to_dict() for f in fits], "skipped": skipped}
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    if trend is not None:
        out["size_trend"] = trend.to_dict()
        out["predictions"] = [trend.predict(s) for s in (args.predict_size or [])]
    if args.json:
        print(json.dumps(_clean(out), indent=2))
        return 0
    _print_fits(pooled, fits, out)
    return 0


def pd_errors():
    import pandas as pd

    return pd.errors


def _check_csv(path: Path) -> None:
    """``--csv FILE`` is a readable UTF-8 file, else one error naming it."""
    from harness.io import read_text

    if not path.exists():
        raise FileNotFoundError(f"--csv {path}: no such file")
    text = read_text(path)  # ValueError naming the file: a directory, not UTF-8, no permission
    if not text.strip():
        raise ValueError(f"--csv {path}: empty file")


def _fmt(v) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4g}"


def _print_fits(pooled, fits, out) -> None:
    head = ["fit", "a", "b", "ceiling(-a+b)", "R²", "points", "a (Theil-Sen)", "b (Theil-Sen)"]
    heldout = pooled.fit_fraction is not None
    if heldout:
        head += ["held out", "rmse_heldout"]
    rows = []
    for f in (fits if len(fits) > 1 else []) + [pooled]:
        r = [
            f.label or "",
            _fmt(f.a),
            _fmt(f.b),
            _fmt(f.ceiling),
            _fmt(f.r2),
            str(f.n_points),
            _fmt(f.a_robust),
            _fmt(f.b_robust),
        ]
        if heldout:
            r += [str(f.n_heldout), _fmt(f.rmse_heldout)]
        rows.append(r)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    for f in (fits if len(fits) > 1 else []) + [pooled]:
        if f.warning:
            print(f"warning: {f.label}: {f.warning}")
    if "size_trend" in out:
        t = out["size_trend"]
        print(
            f"a = {t['a_slope']:.4g}·log10(N) + {t['a_intercept']:.4g} (R² {_fmt(t['a_r2'])}); "
            f"b = {t['b_slope']:.4g}·log10(N) + {t['b_intercept']:.4g} (R² {_fmt(t['b_r2'])})"
            + (" -- only 2 sizes: the line passes through both exactly" if t["n_sizes"] == 2 else "")
        )
        for p in out.get("predictions", []):
            print(f"predicted at N={p['model_params']:.3g}: a={p['a']:.4g} b={p['b']:.4g} ceiling={p['ceiling']:.4g}")
