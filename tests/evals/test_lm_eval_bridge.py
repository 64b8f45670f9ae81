"""lm-eval bridge, offline on the tiny self-trained model: our tasks under lm-eval's own hf model, and lm-eval
driving our engine."""

import json

import pytest

pytest.importorskip("lm_eval")

from harness.cli import main


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_committed_task_configs_are_current(tmp_path):
    from harness.evals.lm_eval_bridge import TASK_DIR, write_task_configs

    written = write_task_configs(tmp_path)
    assert len(written) == 11
    for p in written:
        assert (TASK_DIR / p.name).read_text() == p.read_text(), f"regenerate {p.name}: write_task_configs()"
    aime = (TASK_DIR / "harness_aime24.yaml").read_text()
    assert "repeats: 32" in aime and "take_first_k, k: 32" in aime and "temperature: 0.6" in aime


def test_our_suite_under_lm_eval_hf_model(tiny_model, tiny_data):
    pytest.importorskip("accelerate")
    import lm_eval
    from lm_eval.tasks import TaskManager

    from harness.evals.lm_eval_bridge import TASK_DIR

    tm = TaskManager(include_path=str(TASK_DIR), metadata={"data_dir": str(tiny_data), "template": "raw"})
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={tiny_model},dtype=float32,device=cpu",
        tasks=["harness_math500"],
        task_manager=tm,
        bootstrap_iters=0,
        gen_kwargs="max_gen_toks=16",
    )
    assert res["results"]["harness_math500"]["avg_at_k,all"] == pytest.approx(0.5)  # same as harness eval


def test_lm_eval_through_our_engine_cli(tiny_model, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model,
                "--lm-eval-tasks",
                "harness_math500",
                "--data-dir",
                str(tiny_data),
                "--template",
                "raw",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "lm_eval_results.json").read_text())
    assert res["harness_math500"]["avg_at_k,all"] == pytest.approx(0.5)
    assert "harness_math500" in capsys.readouterr().out


def test_process_results_pass_at_k_unbiased(tmp_path):
    from harness.evals.lm_eval_bridge import process_results

    doc = {"suite": "aime24", "payload": json.dumps({"id": "x", "answer": "25"})}
    r = process_results(doc, [["\\boxed{025}", "\\boxed{24}", "no", "\\boxed{25}"]])
    assert r == {"avg_at_k": 0.5, "pass_at_k": 1.0}
    r1 = process_results(doc, [["\\boxed{1}"]])
    assert r1 == {"avg_at_k": 0.0}


def test_loglikelihood_tasks_refused(tiny_model):
    from harness.evals.engines import HFEngine
    from harness.evals.lm_eval_bridge import harness_lm

    lm = harness_lm(HFEngine(tiny_model))
    with pytest.raises(NotImplementedError, match="only generate"):
        lm.loglikelihood([])


def test_process_results_code_goes_through_the_sandbox():
    from harness.evals.lm_eval_bridge import load_docs, process_results

    docs = load_docs("humaneval_plus", fixtures=True)["test"]
    doc = docs[1]  # add(a, b)
    assert doc["prompt_text"].startswith("Complete the following Python function")
    r = process_results(
        doc,
        [
            [
                "```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```",
                "```python\ndef add(a, b):\n    return a - b\n```",
                "```python\nimport os\nos._exit(0)\n```",
            ]
        ],
    )
    assert r["avg_at_k"] == pytest.approx(1 / 3) and r["pass_at_k"] == 1.0
