"""Figures (produced, with the expected axes), the Theorem-1 pairing, and the sweep report."""

import json

import numpy as np
import pandas as pd
import pytest

from harness.cli import main
from harness.results import plots
from harness.results.collect import collect
from harness.results.plots import entropy_change_pairs, pearson_r, plot_all
from harness.results.report import write_sweep_report


@pytest.fixture
def two_sizes(runs_root, mk):
    for name, size, law in [("pocket-0.3m", 3e5, (0.3, 0.7)), ("pocket-1m", 1e6, (0.25, 0.8))]:
        for method, decay in [("grpo", 0.1), ("kl_cov", 0.04)]:
            mk(
                runs_root,
                f"{name}-{method}",
                model=name,
                model_params=size,
                method=method,
                law=law,
                decay=decay,
                steps=20,
                noise=0.005,
            )
    return runs_root


def test_every_figure_with_expected_axes(two_sizes, tmp_path, monkeypatch):
    seen = {}
    real_save = plots._save

    def spy(fig, out_dir, name, formats=("png", "pdf")):
        seen[name] = [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_xlabel()]
        return real_save(fig, out_dir, name, formats)

    monkeypatch.setattr(plots, "_save", spy)
    col = collect([two_sizes])
    written, skipped = plot_all(col, tmp_path / "figs", "eval/arith/avg@4", formats=("png",))
    assert skipped == []
    assert sorted(p.name for p in written) == sorted(f"{n}.png" for n in plots.FIGURES)
    assert all(p.stat().st_size > 5000 for p in written)
    assert seen["entropy_vs_step"][0] == ("training step", "policy entropy (nats/token)")
    assert len(seen["entropy_vs_step"]) == 2  # one panel per model
    assert seen["reward_vs_step"][0] == ("training step", "training reward (mean)")
    assert seen["score_vs_step"][0] == ("training step", "eval/arith/avg@4")
    assert seen["score_vs_entropy"] == [("policy entropy H", "eval/arith/avg@4")]
    assert seen["cov_distribution"][0][1] == "mean covariance (symlog)"
    assert seen["entropy_change_vs_cov"] == [("covariance term at step t", "−ΔH = H[t] − H[t+1] (entropy)")]
    assert seen["size_scaling"] == [("model parameters N", "a"), ("model parameters N", "b")]


def test_figures_without_data_are_skipped_with_reason(runs_root, mk, tmp_path):
    d = mk(runs_root, "r", steps=6)
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in rec.items() if not k.startswith("cov/")}) + "\n" for rec in lines)
    )
    written, skipped = plot_all(
        collect([d]),
        tmp_path,
        "reward/mean",
        formats=("png",),
        which=["entropy_vs_step", "cov_distribution", "size_scaling"],
    )
    assert [p.name for p in written] == ["entropy_vs_step.png"]
    assert skipped[0] == "cov_distribution: no run logged cov/top_*pct or cov/mean"
    assert skipped[1].startswith("size_scaling: needs law fits for at least two model sizes")


def test_entropy_change_is_paired_with_the_next_step():
    m = pd.DataFrame(
        {
            "run_dir": "r",
            "step": [1, 2, 3, 5, 6],
            "entropy": [1.0, 0.8, 0.7, 0.6, 0.55],
            "cov/term": [0.2, 0.1, 0.05, 0.3, 0.4],
        }
    )
    p = entropy_change_pairs(m).set_index("step")
    # step 3 -> 5 is not consecutive, step 6 has no next step
    assert list(p.index) == [1, 2, 5] and list(p["delta_h"]) == pytest.approx([-0.2, -0.1, -0.05])
    assert pearson_r([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson_r([1, 2, 3], [3, 2, 1.5]) == pytest.approx(np.corrcoef([1, 2, 3], [3, 2, 1.5])[0, 1])


def test_sweep_report(two_sizes, mk, tmp_path):
    mk(two_sizes, "pocket-1m-clip_cov", write_result=False)
    out = tmp_path / "results"
    written = write_sweep_report(two_sizes, out, formats=("png",))
    names = {p.name for p in written}
    assert {
        "leaderboard.md",
        "leaderboard.csv",
        "entropy_law.json",
        "entropy_vs_step.png",
        "reward_vs_step.png",
        "score_vs_entropy.png",
    } <= names
    md = (out / "leaderboard.md").read_text()
    assert "MISSING: 1 run(s)" in md and "pocket-1m-clip_cov (no result.json)" in md
    assert "![entropy_vs_step](entropy_vs_step.png)" in md and f"harness report {two_sizes} --out {out}" in md
    law = json.loads((out / "entropy_law.json").read_text())
    fits = {f["label"]: f for f in law["fits"]}
    assert law["score_key"] == "eval/arith/avg@4" and fits["pocket-1m"]["a"] == pytest.approx(0.25, abs=1e-6)


def test_sweep_report_with_no_finished_run(runs_root, mk, tmp_path):
    mk(runs_root, "a", write_result=False)
    written = write_sweep_report(runs_root, tmp_path / "out", formats=("png",))
    assert [p.name for p in written][-1] == "leaderboard.md"
    assert "No leaderboard: no completed run has eval results" in written[-1].read_text()


def test_cli_plot_errors(runs_root, mk, tmp_path, capsys):
    mk(runs_root, "a", write_result=False)
    assert main(["plot", str(runs_root), "--out", str(tmp_path)]) == 2
    assert "no completed run (result.json) to plot" in capsys.readouterr().err
    assert main(["plot", str(runs_root), "--out", str(tmp_path), "--only", "pie"]) == 2
    assert "unknown figure 'pie'" in capsys.readouterr().err
    assert main(["plot", str(runs_root), "--out", str(tmp_path), "--formats", "gif"]) == 2
    figs = tmp_path / "figs"
    assert (
        main(
            [
                "plot",
                str(runs_root),
                "--out",
                str(figs),
                "--include-incomplete",
                "--only",
                "entropy_vs_step",
                "--formats",
                "png,pdf",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in figs.iterdir()) == ["entropy_vs_step.pdf", "entropy_vs_step.png"]


def test_sweep_report_with_no_run_dirs(tmp_path):
    (tmp_path / "runs").mkdir()
    written = write_sweep_report(tmp_path / "runs", tmp_path / "out")
    assert [p.name for p in written] == ["leaderboard.md"]
    assert "No leaderboard: no run directories under" in written[0].read_text()
