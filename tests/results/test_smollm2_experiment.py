"""scripts/smollm2/experiment.py (issue #24's analysis) on two synthetic runs: start-vs-end differences paired by
problem, the exact McNemar test and the seed-paired difference to GRPO, against values worked out by hand."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("smollm2_experiment", ROOT / "scripts" / "smollm2" / "experiment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_grades(path: Path, grades: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"correct": [[g] for g in grades]}))


def write_run(d: Path, method: str, seed: int, end: list[int], entropy: list[float]) -> None:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"method": {"name": method}, "seed": seed}))
    rows = [
        {"step": i + 1, "entropy": h, "reward/mean": 0.5, "time/rollout": 2.0, "time/update": 3.0}
        for i, h in enumerate(entropy)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "result.json").write_text(json.dumps({"timing": {"peak_rss_mb": 1000}}))
    write_grades(d / "eval" / f"step_{len(rows)}.per_problem.json", end)


def test_mcnemar_is_the_two_sided_binomial_test_of_the_discordant_pairs():
    exp = load_script()
    # gained 3 (problems 2, 3, 4), lost 1 (problem 0): P(X <= 1 or X >= 3 | 4, 1/2) = (1 + 4 + 4 + 1) / 16
    assert exp.mcnemar_exact([1, 1, 0, 0, 0], [0, 1, 1, 1, 1]) == (3, 1, pytest.approx(10 / 16))
    assert exp.mcnemar_exact([1, 0], [1, 0]) == (0, 0, 1.0)  # no discordant pair: nothing to test


def test_tables_from_two_runs(tmp_path):
    exp = load_script()
    start = [1, 0, 0, 0]
    write_grades(tmp_path / "start" / "eval" / "step_0.per_problem.json", start)
    write_run(tmp_path / "runs" / "grpo_s0", "grpo", 0, [1, 1, 0, 0], [0.9, 0.8, 0.5])
    write_run(tmp_path / "runs" / "kl_cov_s0", "kl_cov", 0, [0, 1, 1, 1], [0.9, 0.9, 0.8])
    out = tmp_path / "out"
    assert exp.main([str(tmp_path / "runs"), str(tmp_path / "start"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["start"] == {"acc": 0.25, "n": 4}
    grpo, kl = summary["runs"]
    # grpo: per-problem differences [0, 1, 0, 0]: mean 1/4, sd 1/2, half-width t(0.975, 3) * 0.5 / 2
    assert grpo["diff"] == pytest.approx(0.25) and grpo["diff_ci95"] == pytest.approx(3.182446305 * 0.25)
    assert (grpo["gained"], grpo["lost"], grpo["mcnemar_p"]) == (1, 0, 1.0)
    # 3 logged steps: one step at each end (edge_steps(3) = 1)
    assert grpo["entropy_first_last"] == [0.9, 0.5] and kl["entropy_first_last"] == [0.9, 0.8]
    # kl_cov: differences [-1, 1, 1, 1]: mean 1/2, sd 1; gained 3, lost 1
    assert kl["diff"] == pytest.approx(0.5) and kl["diff_ci95"] == pytest.approx(3.182446305 * 1 / 2)
    assert (kl["gained"], kl["lost"]) == (3, 1)
    # one seed: the difference to GRPO's end accuracy (0.75 - 0.5) has no interval
    assert summary["methods"]["kl_cov"]["vs_grpo"] == pytest.approx(0.25)
    assert math.isnan(summary["methods"]["kl_cov"]["vs_grpo_ci95"])
    table = (out / "table.md").read_text()
    assert "| kl_cov | 0 | 3 | 0.750 | +0.500 ± 1.591 | 3 / 1 | 0.625 |" in table
    assert (out / "curves.png").stat().st_size > 0 and (out / "runs" / "grpo_s0" / "metrics.jsonl").is_file()
