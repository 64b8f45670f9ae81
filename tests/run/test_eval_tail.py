"""A step's eval, written once for every backend: the task's eval document (pocket and TRL), the file it goes to
(all three), its keys in the metrics row (all three; OpenRLHF leaves out a metric upstream did not report)."""

import json

from harness.backends.openrlhf.bridge import eval_metrics_row
from harness.run.config import load_config
from harness.run.metrics import add_eval
from harness.run.records import task_eval_doc, trained_record, write_step_eval


def test_the_task_eval_document_under_the_runs_protocol(tiny, tmp_path):
    tiny["eval"].update(n_samples=4, temperature=0.6, top_p=0.95)
    cfg = load_config(tiny)
    doc = task_eval_doc(cfg, 3, 8, {"avg@4": 0.25, "pass@4": 0.5})
    assert doc == {
        "step": 3,
        "suites": {
            "countdown": {
                "suite": "countdown",
                "n_problems": 8,
                "n_samples": 4,
                "temperature": 0.6,
                "top_p": 0.95,
                "max_tokens": 6,  # eval.max_new_tokens unset: train.max_new_tokens
                "metrics": {"avg@4": 0.25, "pass@4": 0.5},
                "primary": "avg@4",
            }
        },
    }
    path = write_step_eval(tmp_path, doc)
    assert path == tmp_path / "eval" / "step_3.json" and json.loads(path.read_text()) == doc
    row = {"step": 3}
    add_eval(row, doc)
    assert row == {"step": 3, "eval/countdown/avg@4": 0.25, "eval/countdown/pass@4": 0.5}


def test_openrlhf_rows_leave_out_a_metric_upstream_did_not_report():
    doc = {"step": 1, "suites": {"math": {"metrics": {"avg@1": 0.5, "pass@1": None}}}}
    assert eval_metrics_row(doc) == {"eval/math/avg@1": 0.5}


def test_a_trained_record_rounds_timing_and_adds_the_peak_rss(tiny):
    class Method:
        advantage = "grpo"

        def to_config(self):
            return {"name": "grpo"}

    cfg = load_config(tiny)
    rows = [{"step": 1, "entropy": 1.0, "reward/mean": 0.5}]
    rec = trained_record(cfg, Method(), 300, 1, rows, None, {"rollout_s": 1.23456}, {"warm_start": None})
    d = rec.to_dict()
    assert (d["method"], d["advantage"], d["task"], d["seed"], d["steps"], d["model_params"]) == (
        "grpo",
        "grpo",
        "countdown",
        0,
        1,
        300,
    )
    assert d["timing"]["rollout_s"] == 1.235 and d["timing"]["peak_rss_mb"] > 0 and d["warm_start"] is None
    assert d["summary"]["entropy_start"] == 1.0 and d["summary"]["reward_end"] == 0.5
