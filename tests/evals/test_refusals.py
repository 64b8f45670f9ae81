"""Values that make an eval or a grade meaningless, and output-path mistakes, are refused up front with one
`error:` line naming the problem and what is allowed (issue #16 items 7, 8, 11); nothing is written."""

import json

import pytest

from harness.cli import main


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--top-p", "0"], "--top-p 0.0: allowed 0 < top_p <= 1"),
        (["--top-p", "1.5"], "allowed 0 < top_p <= 1"),
        (["--temperature", "-1"], "--temperature -1.0: must be >= 0"),
        (["--n", "0"], "--n 0: must be >= 1"),
        (["--limit", "-3"], "--limit -3: must be >= 1"),
        (["--workers", "0"], "--workers 0: must be >= 1"),
        (["--batch-size", "0"], "--batch-size 0: must be >= 1"),
        (["--max-tokens", "0"], "--max-tokens 0: must be >= 1"),
        (["--lm-eval-tasks", "gsm8k"], "--suites and --lm-eval-tasks are two separate evaluations"),
    ],
)
def test_eval_refuses_meaningless_values_before_loading_a_model(tmp_path, capsys, extra, fragment):
    # the model does not exist: the refusal must come before anything tries to load it
    assert main(["eval", "--model", str(tmp_path / "nope"), "--suites", "math500", *extra]) == 2
    assert fragment in _one_error(capsys)


def test_eval_out_that_is_a_file_is_refused_naming_it(tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("x")
    assert main(["eval", "--model", str(tmp_path / "nope"), "--suites", "math500", "--out", str(f)]) == 2
    assert f"--out {f}: is a file" in _one_error(capsys)


def _lines(tmp_path, rows) -> str:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(src)


MATH = [{"id": 1, "response": "\\boxed{4}", "answer": "4"}]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--timeout", "0"], "--timeout 0.0: must be > 0 seconds"),
        (["--timeout", "-2"], "must be > 0 seconds"),
        (["--workers", "0"], "--workers 0: must be >= 1"),
    ],
)
def test_grade_refuses_meaningless_budgets(tmp_path, capsys, extra, fragment):
    dst = tmp_path / "out.jsonl"
    assert main(["grade", "--input", _lines(tmp_path, MATH), "--output", str(dst), *extra]) == 2
    assert fragment in _one_error(capsys) and not dst.exists()


@pytest.mark.parametrize(
    "row",
    [
        {"id": 1, "response": "def f(): pass", "entry_point": "f"},  # auto: code, but no tests
        {"id": 1, "response": "def f(): pass", "test": "", "entry_point": "f"},  # empty tests
    ],
)
def test_grade_refuses_a_code_line_without_tests_naming_file_and_line(tmp_path, capsys, row):
    src, dst = _lines(tmp_path, [row]), tmp_path / "out.jsonl"
    assert main(["grade", "--input", src, "--output", str(dst)]) == 2
    err = _one_error(capsys)
    assert f"{src}:1: a code line with no tests" in err and not dst.exists()


def test_grade_output_mistakes_name_the_users_path(tmp_path, capsys):
    src = _lines(tmp_path, MATH)
    d = tmp_path / "adir"
    d.mkdir()
    assert main(["grade", "--input", src, "--output", str(d)]) == 2
    assert f"--output {d}: is a directory" in _one_error(capsys)
    f = tmp_path / "afile"
    f.write_text("x")
    assert main(["grade", "--input", src, "--output", str(f / "out.jsonl")]) == 2
    assert f"{f} is a file, not a folder" in _one_error(capsys)


def test_table_out_mistakes_are_one_line(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text("{}")
    assert main(["table", str(tmp_path / "run"), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}: is a directory" in _one_error(capsys)
    f = tmp_path / "file.md"
    f.write_text("x")
    assert main(["plot", str(tmp_path / "run"), "--out", str(f)]) == 2
    assert f"--out {f}: is a file" in _one_error(capsys)


def test_report_into_a_run_directory_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("{}")
    (run / "result.json").write_text("{}")
    assert main(["report", str(tmp_path), "--out", str(run)]) == 2
    assert "is a run directory" in _one_error(capsys)
