"""One run record on every backend: the start/end summary rule, task naming, and result.json written once."""

import json

from harness.run.records import RunResult, SuiteResult, edge_steps, summarize_metrics, task_label
from harness.run.runner import run


def test_summary_averages_a_tenth_of_the_steps_rounded_down():
    assert [edge_steps(n) for n in (1, 9, 10, 15, 19, 20, 25, 30, 50)] == [1, 1, 1, 1, 1, 2, 2, 3, 5]
    rows = [{"step": i + 1, "entropy": float(i), "reward/mean": float(10 * i)} for i in range(15)]
    # 15 steps -> one step at each end: step 1 (entropy 0, reward 0) and step 15 (entropy 14, reward 140)
    assert summarize_metrics(rows) == {
        "entropy_start": 0.0,
        "entropy_end": 14.0,
        "reward_start": 0.0,
        "reward_end": 140.0,
    }
    rows20 = [{"step": i + 1, "entropy": float(i)} for i in range(20)]  # 20 steps -> two: (0+1)/2, (18+19)/2
    s = summarize_metrics(rows20)
    assert (s["entropy_start"], s["entropy_end"], s["reward_start"]) == (0.5, 18.5, None)
    assert summarize_metrics([]) == {} and summarize_metrics([{"no_step": 1}]) == {}


def test_task_is_named_the_same_on_every_backend(tmp_path):
    assert task_label("countdown") == "countdown"
    assert task_label("/data/dapo.jsonl") == "dapo" and task_label("data/aime.parquet") == "aime"
    assert task_label("zwhe99/DeepMath-103K") == "zwhe99/DeepMath-103K"  # a hub dataset id stays whole
    f = tmp_path / "problems"
    f.write_text("{}\n")
    assert task_label(str(f)) == "problems"


def test_records_flatten_to_the_result_json_fields():
    suite = SuiteResult("arith", 8, 2, 0.6, 1.0, 6, {"avg@2": 0.5}, "avg@2").to_dict()
    assert list(suite) == [
        "suite",
        "n_problems",
        "n_samples",
        "temperature",
        "top_p",
        "max_tokens",
        "metrics",
        "primary",
    ]
    rec = RunResult(
        "grpo",
        "grpo",
        {"name": "grpo"},
        "m",
        None,
        "arith",
        0,
        3,
        {},
        None,
        {"update_s": 1.0},
        extra={"warm_start": None},
    )
    d = rec.to_dict()
    assert d["warm_start"] is None and "extra" not in d and d["timing"] == {"update_s": 1.0}


def test_pocket_result_json_is_written_once_by_the_runner(tiny, tmp_path, monkeypatch):
    from harness.backends.pocket import PocketBackend

    seen = []
    real_train = PocketBackend.train

    def train(self, config, run_dir, log=print):
        record = real_train(self, config, run_dir, log=log)
        seen.append((type(record), (run_dir / "result.json").exists()))
        return record

    monkeypatch.setattr(PocketBackend, "train", train)
    tiny["train"]["steps"] = 2
    res = run(tiny, tmp_path / "r", quiet=True)
    assert seen == [(RunResult, False)]  # the backend returned a record and wrote no result.json
    on_disk = json.loads((tmp_path / "r" / "result.json").read_text())
    assert on_disk == res and res["status"] == "completed" and res["task"] == "countdown"
    for key in (
        "schema_version",
        "run_id",
        "backend",
        "name",
        "method",
        "advantage",
        "method_config",
        "model",
        "model_params",
        "seed",
        "steps",
        "summary",
        "eval",
        "timing",
        "warm_start",
        "wall_time_s",
    ):
        assert key in res, key
    assert res["eval"]["suites"]["countdown"]["primary"] == "avg@2"
