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
    assert res["results"]["harness_math500"]["avg_at_k,all"] == pytest.approx(0.5)
    assert "harness_math500" in capsys.readouterr().out
    # lm-eval's config and samples are kept, not only its results block
    config = res["configs"]["harness_math500"]
    assert config["repeats"] == 1 and config["generation_kwargs"]["do_sample"] is False
    assert res["n-samples"]["harness_math500"]["effective"] == 4 and res["versions"]["harness_math500"] == 1.0
    assert res["harness"]["model"] == tiny_model and res["harness"]["gen_kwargs"] == {}
    assert res["harness"]["provenance"]["packages"]["lm-eval"]
    samples = [json.loads(x) for x in (out / "lm_eval_samples_harness_math500.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and sorted(x["avg_at_k"] for x in samples) == [0, 0, 1, 1]
    (first,) = [x for x in samples if x["doc"]["prompt_text"] == "2+3?"]
    assert "\\boxed{5}" in first["resps"][0][0] and first["avg_at_k"] == 1  # the response and its verdict
    # and the file is what `harness table --import-lm-eval` reads: a row of its own, in our math500 column
    capsys.readouterr()
    assert main(["table", "--import-lm-eval", str(out / "lm_eval_results.json"), "--format", "csv"]) == 0
    import csv
    import io
    from pathlib import Path

    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert (row["model"], row["source"], float(row["math500_mean"])) == (Path(tiny_model).name, "lm-eval", 50.0)
    assert row["protocol"] == "math500: avg_at_k,all; problems=4, n=1, T=0.0, top_p=1.0, max_tokens=8192, fewshot=0"


def _lm_eval_cli(tiny_model, tiny_data, out, *flags):
    return main(
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
            *flags,
        ]
    )


def test_lm_eval_max_tokens_reaches_the_generation(tiny_model, tiny_data, tmp_path):
    """--max-tokens 2 cuts every answer to two characters (the tiny model's tokens): no \\boxed{} survives."""
    out = tmp_path / "out"
    assert _lm_eval_cli(tiny_model, tiny_data, out, "--max-tokens", "2") == 0
    res = json.loads((out / "lm_eval_results.json").read_text())
    assert res["configs"]["harness_math500"]["generation_kwargs"]["max_gen_toks"] == 2
    assert res["harness"]["gen_kwargs"] == {"max_gen_toks": 2}
    assert res["results"]["harness_math500"]["avg_at_k,all"] == 0.0  # 0.5 with the task's own 8192
    samples = [json.loads(x) for x in (out / "lm_eval_samples_harness_math500.jsonl").read_text().splitlines()]
    assert all(len(x["resps"][0][0]) <= 2 for x in samples)


def test_lm_eval_sampling_and_vllm_flags_reach_the_engine(tiny_data, tmp_path, monkeypatch):
    """Through the vllm engine's one seam (the stand-in of tests/evals/vllm_stand_in.py): the engine is started with
    --tensor-parallel-size and every request carries --temperature, --top-p and --max-tokens."""
    import sys
    from pathlib import Path

    from harness.evals import vllm_runner

    sys.path.insert(0, str(Path(__file__).parent))
    from vllm_stand_in import STAND_IN

    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("VLLM_STAND_IN_LOG", str(log))
    monkeypatch.setattr(vllm_runner, "VLLM_RUNTIME", STAND_IN)
    out = tmp_path / "out"
    flags = ["--engine", "vllm", "--tensor-parallel-size", "2", "--temperature", "0.7", "--top-p", "0.9"]
    assert _lm_eval_cli("org/model", tiny_data, out, *flags, "--max-tokens", "12", "--seed", "3") == 0
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert calls and all(c["llm"]["tensor_parallel_size"] == 2 and c["llm"]["seed"] == 3 for c in calls)
    params = [p for c in calls for p in c["params"]]
    assert len(params) == 4
    assert {(p["temperature"], p["top_p"], p["max_tokens"]) for p in params} == {(0.7, 0.9, 12)}
    res = json.loads((out / "lm_eval_results.json").read_text())
    gk = res["configs"]["harness_math500"]["generation_kwargs"]
    assert (gk["do_sample"], gk["temperature"], gk["top_p"], gk["max_gen_toks"]) == (True, 0.7, 0.9, 12)
    assert res["harness"]["engine_options"]["tensor_parallel_size"] == 2


def test_lm_eval_refuses_n_by_name(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert _lm_eval_cli("org/model", tiny_data, out, "--n", "4", "--temperature", "0.6") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --n 4: not passed to lm-eval tasks")
    assert not out.exists()


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


def test_lm_eval_chat_scores_a_chat_model_through_its_template(tiny_chat_model, tiny_data, tmp_path):
    """Issue 34 item 7: `--chat` crashed on lm-eval 0.4.13 (the LM lacked `tokenizer_name`). The tiny chat model
    answers each problem right only inside its template (<problem>=) and says "no idea" to the raw problem, so
    the real lm-eval scores it 1.0 with --chat and 0.0 without; the template is applied once (by lm-eval)."""
    chat, raw = tmp_path / "chat", tmp_path / "raw"
    assert _lm_eval_cli(tiny_chat_model, tiny_data, chat, "--chat", "--max-tokens", "12") == 0
    assert _lm_eval_cli(tiny_chat_model, tiny_data, raw, "--max-tokens", "12") == 0
    res = json.loads((chat / "lm_eval_results.json").read_text())
    assert res["results"]["harness_math500"]["avg_at_k,all"] == 1.0
    assert json.loads((raw / "lm_eval_results.json").read_text())["results"]["harness_math500"]["avg_at_k,all"] == 0.0
    assert res["harness"]["apply_chat_template"] is True and res["harness"]["engine_options"]["chat"] is False
    samples = [json.loads(x) for x in (chat / "lm_eval_samples_harness_math500.jsonl").read_text().splitlines()]
    (first,) = [x for x in samples if x["doc"]["prompt_text"] == "2+3?"]
    assert first["arguments"][0][0] == "<2+3?>="  # the request lm-eval built: rendered by the template, once
    assert first["resps"][0][0] == "\\boxed{5}"


def test_lm_eval_chat_refuses_a_tokenizer_without_a_template(tiny_model, tiny_data, tmp_path, capsys):
    assert _lm_eval_cli(tiny_model, tiny_data, tmp_path / "out", "--chat") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1]
        == f"error: --chat: the tokenizer of {tiny_model} has no chat template; drop --chat to score raw prompts"
    )
