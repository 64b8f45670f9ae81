"""One call that turns a finished sweep's run directories into leaderboard.{md,csv}, figures and law fits."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from harness.run.metrics import ENTROPY

from .collect import collect
from .fit import fit_groups
from .plots import plot_all
from .points import resolve_score_key, run_points
from .table import build_leaderboard, render

STANDARD_FIGURES = [
    "entropy_vs_step",
    "reward_vs_step",
    "score_vs_step",
    "score_vs_entropy",
    "entropy_change_vs_cov",
    "cov_distribution",
    "size_scaling",
]


def _write(path: Path, text: str) -> Path:
    """Atomic text write (temp file + rename): an interrupted report never leaves half a file."""
    from harness.io import atomic_write_text  # the umask's mode, like every other run file

    return atomic_write_text(path, text)


def write_sweep_report(
    runs_dir, out_dir, score_key: str = "auto", formats=("png", "pdf"), reference: str | None = None
) -> list[Path]:
    """Leaderboard (md, csv), the standard figures and ``entropy_law.json`` for every run under ``runs_dir``.

    Runs without ``result.json`` are listed as missing in the leaderboard notes. Returns the written paths
    (leaderboard.md is written last, so it can link every figure that was made)."""
    out_dir = Path(out_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # collect() keeps them in col.warnings; they go into the notes
        try:
            col = collect([runs_dir])
        except FileNotFoundError as e:  # nothing ran yet: say so rather than fail the sweep
            return [_write(out_dir / "leaderboard.md", f"# Leaderboard: {runs_dir}\n\nNo leaderboard: {e}\n")]
    written: list[Path] = []
    try:
        lb = build_leaderboard(col, reference=reference)
        for n in col.warnings:
            lb.notes.append(f"WARNING: {n}")
        md, csv = render(lb, "md"), render(lb, "csv")
    except ValueError as e:  # e.g. no run finished: say so instead of failing the sweep
        md, csv = f"No leaderboard: {e}\n", ""
    if csv:
        written.append(_write(out_dir / "leaderboard.csv", csv))
    try:
        key = resolve_score_key(col, score_key)
    except ValueError:
        key = None
    skipped = []
    if key is not None:
        figs, skipped = plot_all(col, out_dir, key, formats=formats, which=STANDARD_FIGURES)
        written += figs
        try:
            fits = fit_groups(run_points(col, key), by="model")
            law = {"score_key": key, "entropy_key": ENTROPY, "fits": [f.to_dict() for f in fits]}
            written.append(_write(out_dir / "entropy_law.json", json.dumps(law, indent=2) + "\n"))
        except ValueError as e:
            skipped.append(f"entropy_law.json: {e}")
    if skipped:
        written.append(_write(out_dir / "skipped.txt", "\n".join(skipped) + "\n"))
    written.append(_write(out_dir / "leaderboard.md", _page(runs_dir, out_dir, md, written, skipped, key, reference)))
    return written


def _page(runs_dir, out_dir: Path, table_md: str, written: list[Path], skipped: list[str], key, reference) -> str:
    ref = f" --reference {reference}" if reference else ""
    lines = [
        f"# Leaderboard: {runs_dir}",
        "",
        f"Regenerate: `harness report {runs_dir} --out {out_dir}{ref}` (or re-run the sweep with "
        f"`--results-dir {out_dir}`).",
        "",
        table_md.rstrip(),
        "",
    ]
    pngs = [p for p in written if p.suffix == ".png"]
    if pngs:
        lines += ["## Figures", "", f"Score key: `{key}`. Entropy-law fits per model: `entropy_law.json`.", ""]
        lines += [f"![{p.stem}]({p.name})" for p in pngs]
    if skipped:
        lines += ["", "Not drawn (the runs did not log what they need):", ""] + [f"- {s}" for s in skipped]
    return "\n".join(lines) + "\n"
