"""check_training_file: every refusal, its count and example in one line, and what a good file returns."""

import hashlib
import json

import pytest

pytest.importorskip("math_verify")

from harness.cli import main  # noqa: E402
from harness.data import RAW_DAPO_PROMPTS, TrainingDataError, check_training_file  # noqa: E402

BOXED = "\n\nPresent the answer in LaTeX format: \\boxed{Your answer}."


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refusal(path, **kw) -> str:
    with pytest.raises(TrainingDataError) as e:
        check_training_file(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_raw_dapo_prompts_are_refused_with_their_count():
    msg = refusal(RAW_DAPO_PROMPTS)
    assert msg.startswith(f"{RAW_DAPO_PROMPTS}: 12 of 12 prompts do not ask for the answer in \\boxed{{}}")
    assert "(12 ask for another format)" in msg
    assert "e.g. line 1 asks for another answer format" in msg
    assert "'Solve the following math problem step by step." in msg


def test_the_count_names_only_the_failing_prompts(tmp_path):
    rows = [{"prompt": f"Q{i}" + ("" if i in (2, 4) else BOXED), "answer": str(i)} for i in range(1, 6)]
    msg = refusal(write_rows(tmp_path / "t.jsonl", rows))
    assert ": 2 of 5 prompts do not ask" in msg
    assert "(0 ask for another format)" in msg
    assert "e.g. line 2 does not ask for the answer in \\boxed{}: 'Q2'" in msg


def test_gold_answers_the_grader_cannot_verify_are_refused(tmp_path):
    rows = [{"prompt": "Q" + BOXED, "answer": a} for a in ["1", "", "2", "\\sqrt{}"]]
    msg = refusal(write_rows(tmp_path / "t.jsonl", rows), sample=0)
    assert ": 2 of 4 sampled gold answers (seed 0) cannot be verified by the grader against themselves" in msg
    assert "e.g. line 2: answer '' (empty)" in msg


def test_a_good_file_returns_what_was_checked(tmp_path):
    rows = [{"prompt": f"Q{i}" + BOXED, "answer": str(i)} for i in range(10)]
    path = write_rows(tmp_path / "t.jsonl", rows)
    s = check_training_file(path, sample=3, seed=5)
    assert (s.rows, s.gold_checked, s.gold_seed) == (10, 3, 5)
    assert s.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert check_training_file(path, sample=0).gold_checked == 10
    assert check_training_file(path, sample=50).gold_checked == 10


def test_chat_message_prompts_and_other_keys(tmp_path):
    rows = [
        {"q": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?" + BOXED}], "a": "2"},
        {"q": [{"role": "user", "content": "2+2?" + BOXED}], "a": 4},
    ]
    s = check_training_file(write_rows(tmp_path / "t.jsonl", rows), input_key="q", label_key="a")
    assert s.rows == 2


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "a \\\\boxed{}", "answer": "1"}', "{not json"], "t.jsonl:2: not valid JSON"),
        (['{"prompt": "a \\\\boxed{}"}'], "t.jsonl:1: needs the fields 'prompt' and 'answer'"),
        (['{"prompt": 3, "answer": "1"}'], "t.jsonl:1: 'prompt' must be a string or a list"),
        ([], "t.jsonl: no rows"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, lines, message):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    assert message in refusal(path)


def test_only_jsonl_is_checked(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"x")
    assert "reads JSONL files" in refusal(tmp_path / "t.parquet")
    with pytest.raises(FileNotFoundError):
        check_training_file(tmp_path / "missing.jsonl")


def test_cli_check_exits_2_with_one_error_line(capsys):
    assert main(["data", "check", str(RAW_DAPO_PROMPTS)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "12 of 12 prompts" in err[0]
