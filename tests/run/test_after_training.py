"""``eval.after_training``: the runner exports the final policy through the backend, scores the suites with
``harness eval``'s pipeline and attaches the results to the run (result.json eval at the final step, with the
run's method and seed); a failed stage fails the run, and the resubmission retrains nothing and retries it."""

import json

import pytest
import yaml

from harness.run.config import load_config
from harness.run.runner import run


def _cfg(tiny, **eval_kw):
    tiny = {**tiny, "eval": {**tiny["eval"], "every": 0, "after_training": True, "protocol": "section", **eval_kw}}
    tiny["eval"]["max_new_tokens"] = 6
    return load_config(tiny)


def test_scores_the_runs_own_task_and_a_named_suite_and_attaches_them(tiny, tmp_path):
    cfg = _cfg(tiny, suites=["pocket_arith"])
    result = run(cfg, tmp_path / "r", quiet=True)
    assert result["status"] == "completed"
    res = result["eval"]["suites"]["pocket_arith"]
    assert res["stage"] == "after_training" and result["eval"]["step"] == cfg.train.steps
    assert res["n_samples"] == cfg.eval.n_samples and res["n_problems"] == cfg.eval.max_problems
    stage = tmp_path / "r" / "eval" / "after_training"
    on_disk = json.loads((stage / "results.json").read_text())["suites"]["pocket_arith"]
    assert on_disk["metrics"] == res["metrics"]
    graded = [json.loads(line) for line in (stage / "pocket_arith.graded.jsonl").read_text().splitlines()]
    assert len(graded) == cfg.eval.max_problems * cfg.eval.n_samples
    assert res["metrics"][res["primary"]] == pytest.approx(sum(g["correct"] for g in graded) / len(graded))
    model_run = json.loads((tmp_path / "r" / "export" / f"step_{cfg.train.steps}" / "harness_run.json").read_text())
    assert (model_run["run_id"], model_run["method"], model_run["seed"]) == (cfg.run_id(), "grpo", cfg.seed)
    prov = result["provenance"]
    assert {"git_commit", "git_dirty", "packages", "datasets", "hardware", "created"} <= set(prov)
    assert prov["datasets"][0]["name"] == cfg.task.name and len(prov["datasets"][0]["sha256"]) == 64


def test_empty_suites_score_the_task_the_export_names(tiny, tmp_path):
    cfg = _cfg(tiny)
    result = run(cfg, tmp_path / "r", quiet=True)
    assert list(result["eval"]["suites"]) == [cfg.task.name]  # the run's own task label: one leaderboard column


def test_a_failed_stage_fails_the_run_and_the_rerun_only_retries_the_stage(tiny, tmp_path):
    cfg = _cfg(tiny, suites=["pocket_arith"])
    rd = tmp_path / "r"
    stage = rd / "eval" / "after_training"
    stage.mkdir(parents=True)
    (stage / "pocket_arith.protocol.json").write_text(json.dumps({"suite": "pocket_arith", "engine": "other"}))
    with pytest.raises(ValueError, match="different"):
        run(cfg, rd, quiet=True)
    assert json.loads((rd / "result.json").read_text())["status"] == "failed"
    rows = (rd / "metrics.jsonl").read_text().splitlines()
    (stage / "pocket_arith.protocol.json").unlink()
    result = run(cfg, rd, quiet=True)
    assert result["status"] == "completed" and "pocket_arith" in result["eval"]["suites"]
    assert (rd / "metrics.jsonl").read_text().splitlines() == rows  # no step retrained


def test_unknown_suite_is_refused_at_load(tiny):
    with pytest.raises(Exception, match="math5000.*Did you mean 'math500'"):
        load_config({**tiny, "eval": {"suites": ["math5000"]}})
    assert yaml.safe_dump(load_config(tiny).to_dict())  # the default config still loads


def test_a_posthoc_eval_of_an_exported_run_carries_its_method_seed_and_step(tiny, tmp_path, capsys):
    """Issue 22 item 6: evaluating a run's export afterwards used to give an anonymous 'eval-only' row."""
    from harness.cli import main
    from harness.results.collect import collect

    cfg = load_config({**tiny, "seed": 3, "eval": {**tiny["eval"], "every": 0}})
    run(cfg, tmp_path / "r", quiet=True)
    assert main(["export", str(tmp_path / "r"), "--out", str(tmp_path / "m")]) == 0
    out = tmp_path / "posthoc"
    args = ["eval", "--model", str(tmp_path / "m"), "--suites", cfg.task.name, "--limit", "4", "--out", str(out)]
    assert main([*args, "--n", "1", "--temperature", "0", "--max-tokens", "6"]) == 0
    assert "attached to run " + cfg.run_id() in capsys.readouterr().out
    saved = json.loads((out / "results.json").read_text())["run"]
    assert (saved["method"], saved["seed"], saved["step"]) == ("grpo", 3, cfg.train.steps)
    col = collect([out])
    row = col.runs.iloc[0]
    assert (row["method"], row["seed"]) == ("grpo", 3)
    assert set(col.evals["step"]) == {cfg.train.steps}
