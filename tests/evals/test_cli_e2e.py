"""``harness eval`` end to end on a tiny model the tests train themselves; ``harness grade``; resume; errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

REPO = Path(__file__).resolve().parents[2]


def read_jsonl(p):
    return [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]


def _values():
    """The tiny model's problems from conftest.py (conftest modules are not importable by name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_conftest", Path(__file__).with_name("conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TINY_PROBLEMS, mod.TINY_EXPECTED_GREEDY


TINY_PROBLEMS, TINY_EXPECTED_GREEDY = _values()


def test_eval_end_to_end(tiny_model, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "eval",
        "--model",
        tiny_model,
        "--suites",
        "math500",
        "--data-dir",
        str(tiny_data),
        "--out",
        str(out),
        "--template",
        "raw",
        "--max-tokens",
        "16",
        "--batch-size",
        "4",
    ]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["math500"]
    assert {
        k: res[k] for k in ("suite", "n_problems", "n_samples", "temperature", "top_p", "max_tokens", "primary")
    } == {
        "suite": "math500",
        "n_problems": 4,
        "n_samples": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 16,
        "primary": "avg@1",
    }
    assert res["metrics"]["avg@1"] == pytest.approx(TINY_EXPECTED_GREEDY)
    assert res["metrics"]["greedy"] == pytest.approx(TINY_EXPECTED_GREEDY)
    graded = read_jsonl(out / "math500.graded.jsonl")
    assert [(g["response"], g["correct"]) for g in graded] == [
        (resp, resp.endswith("\\boxed{" + gold + "}")) for _, gold, resp in TINY_PROBLEMS
    ]
    assert graded[3]["reason"] == "no_box"
    assert "avg@1=0.5000" in capsys.readouterr().out

    # resume: keep 1 complete line + a torn one; the rerun generates only the 3 missing samples
    gen = out / "math500.generations.jsonl"
    lines = gen.read_text().splitlines()
    gen.write_text(lines[0] + "\n" + lines[1][:10])
    assert main(args) == 0
    res2 = json.loads((out / "results.json").read_text())["suites"]["math500"]
    assert res2["resumed_samples"] == 1
    assert res2["metrics"] == res["metrics"]
    assert len(read_jsonl(gen)) == 4

    # a line whose response is null (a hand-edited file) is generated again instead of crashing the eval
    rows = read_jsonl(gen)
    rows[0]["response"] = None
    gen.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(args) == 0
    res_null = json.loads((out / "results.json").read_text())["suites"]["math500"]
    assert res_null["resumed_samples"] == 3 and res_null["metrics"] == res["metrics"]

    # a larger problem set in the same directory reuses what is there
    out2 = tmp_path / "out2"
    first = [
        "eval",
        "--model",
        tiny_model,
        "--suites",
        "math500",
        "--data-dir",
        str(tiny_data),
        "--out",
        str(out2),
        "--template",
        "raw",
        "--max-tokens",
        "16",
    ]
    assert main(first + ["--limit", "2"]) == 0
    assert main(first) == 0
    res3 = json.loads((out2 / "results.json").read_text())["suites"]["math500"]
    assert res3["resumed_samples"] == 2 and res3["n_problems"] == 4
    assert res3["metrics"] == res["metrics"]

    # a different protocol in the same directory is refused, nothing is overwritten
    before = gen.read_text()
    assert main(args[:-4] + ["--max-tokens", "8", "--batch-size", "4"]) == 2
    assert "different protocol" in capsys.readouterr().err
    assert gen.read_text() == before


def test_eval_sampled_protocol(tiny_model, tiny_data, tmp_path):
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model,
                "--suites",
                "math500",
                "--data-dir",
                str(tiny_data),
                "--out",
                str(out),
                "--template",
                "raw",
                "--max-tokens",
                "12",
                "--n",
                "3",
                "--temperature",
                "0.6",
                "--top-p",
                "0.95",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())["suites"]["math500"]
    assert (res["n_samples"], res["temperature"], res["top_p"], res["primary"]) == (3, 0.6, 0.95, "avg@3")
    assert {"avg@3", "avg@3_stderr", "pass@3", "maj@3"} <= set(res["metrics"])
    graded = read_jsonl(out / "math500.graded.jsonl")
    assert len(graded) == 12 and sorted({g["sample"] for g in graded}) == [0, 1, 2]
    per = {}
    for g in graded:
        per.setdefault(g["id"], []).append(g["correct"])
    assert res["metrics"]["avg@3"] == pytest.approx(sum(sum(v) / 3 for v in per.values()) / 4)
    assert res["metrics"]["pass@3"] == pytest.approx(sum(any(v) for v in per.values()) / 4)


def test_eval_code_suite_with_fixture_data(tiny_model, tmp_path):
    """The tiny model cannot code: every sample is graded in the sandbox and fails, but the pipeline runs."""
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model,
                "--suites",
                "humaneval_plus",
                "--fixtures",
                "--limit",
                "2",
                "--out",
                str(out),
                "--max-tokens",
                "4",
                "--template",
                "code_completion",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())["suites"]["humaneval_plus"]
    assert res["n_problems"] == 2 and res["metrics"]["avg@1"] == 0.0
    graded = read_jsonl(out / "humaneval_plus.graded.jsonl")
    assert all(g["status"] in ("failed", "error") for g in graded)


def test_eval_errors(tmp_path, capsys, monkeypatch):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--suites", "aime42"]) == 2
    assert "nope does not exist" in capsys.readouterr().err  # the model first: an export would bring its suite (#37)
    assert main(["eval", "--model", str(tmp_path), "--suites", "aime42"]) == 2
    assert "'aime24'" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path), "--suites", "math500", "--n", "4"]) == 2
    assert "temperature" in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "nope"), "--suites", "math500", "--fixtures"]) == 2
    assert "nope does not exist" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert main(["eval", "--model", str(tmp_path), "--suites", "math500"]) == 2  # data checked before loading
    err = capsys.readouterr().err
    assert "HuggingFaceH4/MATH-500" in err and "--data-dir" in err
    assert main(["eval", "--list-suites"]) == 0
    assert "aime24" in capsys.readouterr().out


def test_grade_math_and_code(tmp_path, capsys):
    src = tmp_path / "gens.jsonl"
    rows = [
        {"id": "m1", "response": "so \\boxed{025}", "answer": "25"},
        {"id": "m2", "response": "the answer is 25", "answer": "25"},
        {
            "id": "c1",
            "prompt": "def f(x):\n",
            "response": "    return x + 1\n",
            "test": "def check(c):\n    assert c(1) == 2\n",
            "entry_point": "f",
        },
        {
            "id": "c2",
            "prompt": "def f(x):\n",
            "response": "    while True: pass\n",
            "test": "def check(c):\n    assert c(1) == 2\n",
            "entry_point": "f",
        },
        {
            "id": "c3",
            "prompt": "def f(x):\n",
            "response": "    import os; os._exit(0)\n",
            "test": "def check(c):\n    assert c(1) == 2\n",
            "entry_point": "f",
        },
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dst = tmp_path / "graded.jsonl"
    assert main(["grade", "--input", str(src), "--output", str(dst), "--timeout", "3"]) == 0
    out = read_jsonl(dst)
    assert [r["correct"] for r in out] == [True, False, True, False, False]
    assert [r.get("status") for r in out] == [None, None, "passed", "timeout", "failed"]
    for a, b in zip(rows, out):
        assert {k: b[k] for k in a} == a  # the input line is kept as is
    assert "detail" in out[2] and "pred" in out[0]
    assert "2 correct" in capsys.readouterr().out


def test_grade_bad_input_is_clear_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "bad.jsonl"
    src.write_text(
        json.dumps({"id": 1, "response": "\\boxed{1}", "answer": "1"})
        + "\n"
        + json.dumps({"id": 2, "response": "\\boxed{1}"})
        + "\n"
    )
    dst = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(src), "--output", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "answer" in err
    assert not dst.exists()
    assert main(["grade", "--input", str(src), "--output", str(src)]) == 2
    assert main(["grade", "--input", str(tmp_path / "missing.jsonl"), "--output", str(dst)]) == 2


def test_cli_entry_point_subprocess(tmp_path):
    src = tmp_path / "g.jsonl"
    src.write_text(json.dumps({"id": "a", "response": "\\boxed{\\frac12}", "answer": "0.5"}) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "harness", "grade", "--input", str(src), "--output", str(tmp_path / "o.jsonl")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert read_jsonl(tmp_path / "o.jsonl")[0]["correct"] is True


def test_out_dir_of_another_model_is_refused(tiny_model, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"engine": "hf", "model": "other/model", "suites": {}}))
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model,
                "--suites",
                "math500",
                "--data-dir",
                str(tiny_data),
                "--out",
                str(out),
                "--template",
                "raw",
                "--max-tokens",
                "8",
            ]
        )
        == 2
    )
    assert "other/model" in capsys.readouterr().err
    assert not (out / "math500.generations.jsonl").exists()


def test_engine_errors(tiny_model, tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        assert main(["eval", "--model", tiny_model, "--suites", "math500", "--fixtures", "--engine", "vllm"]) == 2
        assert "needs the vllm package" in capsys.readouterr().err
    assert main(["eval", "--model", tiny_model, "--suites", "math500", "--fixtures", "--engine", "vlm"]) == 2
    assert "Did you mean 'vllm'" in capsys.readouterr().err
    assert (
        main(
            ["eval", "--model", tiny_model, "--suites", "math500", "--fixtures", "--chat", "--out", str(tmp_path / "o")]
        )
        == 2
    )
    assert "no chat template" in capsys.readouterr().err
