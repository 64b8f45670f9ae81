"""``eval.after_training``: the runner exports the final policy through the backend, scores the suites with
``harness eval``'s pipeline and attaches the results to the run (result.json eval at the final step, with the
run's method and seed); a failed stage leaves the finished run finished, with its evaluation marked failed and the
command that retries only the stage."""

import json
import sys

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


def test_a_failed_stage_leaves_the_run_completed_and_the_retry_command_only_evaluates(tiny, tmp_path, capsys):
    """Issue 34: a suite whose data is missing fails the stage after training finished: result.json stays
    completed with eval_status failed, the error and the exact retry command; `harness status` shows it; a plain
    rerun retrains nothing; the retry command (run as printed) scores the suite and touches no training file."""
    import shlex
    import shutil
    import subprocess

    from harness.cli import main
    from harness.evals.suites import FIXTURE_DIR
    from harness.sweeps.status import cell_status, format_table

    data = tmp_path / "suite_data"
    data.mkdir()
    cfg = _cfg(tiny, suites=["math500"], data_dir=str(data), max_problems=2)
    rd = tmp_path / "r"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(rd)]) == 1  # trained; the evaluation failed
    err = capsys.readouterr().err
    result = json.loads((rd / "result.json").read_text())
    retry = f"{sys.executable} -m harness train {rd / 'config.yaml'} --run-dir {rd} --eval-only"
    assert result["status"] == "completed" and result["updates"] == {"made": 3, "expected": 3}
    assert result["eval_status"] == "failed" and result["eval_retry"] == retry
    assert result["eval_error"].startswith("FileNotFoundError: no data file for suite math500 in ")
    assert "math500" not in result["eval"]["suites"]  # the in-loop results are kept, nothing after training
    assert f"retry only it: {retry}" in err
    frozen = {p: p.read_bytes() for p in [rd / "metrics.jsonl", *(rd / "checkpoints").iterdir()]}

    (rd / "cell.json").write_text(json.dumps({"id": cfg.run_id(), "alias": "a"}))  # as a sweep cell: harness status
    st = cell_status(rd)
    assert st.state == "done" and st.detail.startswith("evaluation failed (FileNotFoundError: no data file")
    assert f"    | retry only the evaluation: {retry}" in format_table([st], tails=False)
    (rd / "cell.json").unlink()

    assert run(cfg, rd, quiet=True)["eval_status"] == "failed"  # a resubmission: done, nothing retrains

    shutil.copy(FIXTURE_DIR / "math500.jsonl", data / "math500.jsonl")
    subprocess.run(shlex.split(result["eval_retry"]), check=True, capture_output=True, timeout=600)
    result = json.loads((rd / "result.json").read_text())
    assert result["status"] == "completed" and result["eval_status"] == "completed"
    assert not {"eval_error", "eval_retry", "eval_traceback"} & set(result)
    assert result["eval"]["suites"]["math500"]["stage"] == "after_training"
    assert result["eval"]["suites"]["math500"]["n_problems"] == 2
    assert {p: p.read_bytes() for p in frozen} == frozen  # no step retrained, no checkpoint rewritten


def test_eval_only_refuses_a_run_that_has_not_finished_training(tiny, tmp_path):
    from harness.run.retry_eval import retry

    cfg = _cfg(tiny, suites=["pocket_arith"])
    with pytest.raises(ValueError, match=r"^--eval-only: .* has not finished training \(no result.json\); train it"):
        retry(cfg, tmp_path / "r")
    with pytest.raises(ValueError, match=r"has no after-training stage"):
        retry(load_config(tiny), tmp_path / "r")


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


def test_the_stage_hands_the_engine_its_settings(tiny, tmp_path, monkeypatch):
    """The stage builds the vLLM engine with the eval section's (or the backend plan's) tensor/data parallel size,
    max_model_len and memory utilisation; vLLM enters through its one seam, the runtime (vllm_stand_in.py)."""
    from pathlib import Path

    from harness.evals import vllm_runner

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evals"))
    from vllm_stand_in import STAND_IN

    monkeypatch.setattr(vllm_runner, "VLLM_RUNTIME", STAND_IN)
    monkeypatch.setenv("VLLM_STAND_IN_LOG", str(tmp_path / "calls.jsonl"))
    engine = {"engine": "vllm", "tensor_parallel_size": 2, "max_model_len": 64, "gpu_memory_utilization": 0.5}
    cfg = _cfg(tiny, suites=["math500"], fixtures=True, max_problems=2, **engine)
    result = run(cfg, tmp_path / "r", quiet=True)
    assert result["eval_status"] == "completed" and result["eval"]["suites"]["math500"]["n_problems"] == 2
    (call,) = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert {k: call["llm"][k] for k in ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization")} == {
        "tensor_parallel_size": 2,
        "max_model_len": 64,
        "gpu_memory_utilization": 0.5,
    }


def test_eval_only_names_a_cut_config_yaml(tiny, tmp_path):
    """A retry given the run's own config.yaml, cut short (main's load_stored_config case), reads as another run:
    the refusal says the file lacks sections instead of asking for the file it was given."""
    from harness.run.retry_eval import retry

    cfg = _cfg(tiny, suites=["pocket_arith"])
    rd = tmp_path / "r"
    rd.mkdir()
    (rd / "result.json").write_text(json.dumps({"status": "completed", "run_id": "0123456789ab"}))
    (rd / "config.yaml").write_text(yaml.safe_dump({k: v for k, v in cfg.to_dict().items() if k != "logging"}))
    with pytest.raises(ValueError, match=r"config\.yaml: no logging section \(the harness writes them all: cut short"):
        retry(cfg, rd)
    (rd / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    with pytest.raises(ValueError, match=r"holds run 0123456789ab, .*; give the run's own config \("):
        retry(cfg, rd)
