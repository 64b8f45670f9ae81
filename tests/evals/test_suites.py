"""Suite registry: names, paper protocols, data loading (local files override the hub), clear errors."""

import gzip
import json

import pytest

from harness.evals.suites import SUITES, Protocol, get_suite, list_suites, resolve_suites

PAPER_SUITES = [
    "aime24",
    "aime25",
    "amc23",
    "math500",
    "minerva",
    "olympiadbench",
    "omnimath",
    "humaneval_plus",
    "mbpp_plus",
    "livecodebench",
    "kodcode",
]


def test_all_suites_registered_with_fixtures():
    names = list_suites()
    for n in PAPER_SUITES:
        assert n in names
        rows = get_suite(n).load(fixtures=True)
        assert rows and all(r["id"] and r["prompt_text"] for r in rows)
        if get_suite(n).kind == "math":
            assert all(isinstance(r["answer"], str) and r["answer"] for r in rows)


def test_paper_protocols():
    for n in ("aime24", "aime25", "amc23"):
        p = get_suite(n).protocol
        assert (p.n_samples, p.temperature, p.top_p, p.max_tokens) == (32, 0.6, 1.0, 8192)
        assert p.primary == "avg@32"
    for n in ("math500", "minerva", "olympiadbench", "omnimath", "humaneval_plus", "livecodebench"):
        p = get_suite(n).protocol
        assert (p.n_samples, p.temperature, p.max_tokens) == (1, 0.0, 8192)


def test_protocol_overrides_and_validation():
    p = get_suite("aime24").protocol.with_overrides(n_samples=4, max_tokens=512, temperature=None)
    assert (p.n_samples, p.temperature, p.max_tokens) == (4, 0.6, 512)
    with pytest.raises(ValueError, match="identical"):
        Protocol().with_overrides(n_samples=4)
    with pytest.raises(ValueError, match="top_p"):
        Protocol().with_overrides(top_p=0)


def test_field_conversions():
    aime = get_suite("aime24").load(fixtures=True)[0]
    assert aime["id"] == "2024-I-1" and aime["answer"] == "204"
    assert aime["prompt_text"].endswith("put your final answer within \\boxed{}.")
    amc = get_suite("amc23").load(fixtures=True)
    assert [r["answer"] for r in amc] == ["27", "0.75"]  # float 27.0 -> "27"
    minerva = get_suite("minerva").load(fixtures=True)
    assert [r["answer"] for r in minerva] == ["6", "1000"]  # from the boxed solution
    ob = get_suite("olympiadbench").load(fixtures=True)
    assert ob[0]["answer"] == "-2, 2"
    assert (
        get_suite("math500").load(fixtures=True, template="prime_math")[1]["prompt_text"]
        == "What is $1+1$?\n\nPresent the answer in LaTex format: \\boxed{Your answer}"
    )


def test_a_solution_with_several_boxes_keeps_every_box_as_the_gold(tmp_path):
    """Minerva/MATH style golds come from the solution: a two-part answer boxed twice is both parts (it kept the
    last box only, so a complete answer '3, 7' was graded wrong)."""
    rows = [{"problem": "Find a and b.", "solution": "So $a=\\boxed{3}$ and $b=\\boxed{7}$."}]
    (tmp_path / "minerva.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (got,) = get_suite("minerva").load(data_dir=tmp_path)
    assert got["answer"] == "3, 7"


def test_local_files_override_the_hub(tmp_path):
    rows = [{"id": "a", "problem": "1+1", "answer": "2"}, {"id": "b", "problem": "2+2", "answer": "4"}]
    (tmp_path / "aime25.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with gzip.open(tmp_path / "math500.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows))
    import pandas as pd

    pd.DataFrame(rows).to_parquet(tmp_path / "omnimath.parquet")
    for name in ("aime25", "math500", "omnimath"):
        got = get_suite(name).load(data_dir=tmp_path)
        assert [(r["id"], r["answer"]) for r in got] == [("a", "2"), ("b", "4")]
    assert len(get_suite("aime25").load(data_dir=tmp_path, limit=1)) == 1


def test_missing_data_names_the_dataset_and_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(FileNotFoundError) as e:
        get_suite("aime24").load()
    msg = str(e.value)
    assert "Maxwell-Jia/AIME_2024" in msg and "--data-dir" in msg and "aime24.jsonl" in msg
    with pytest.raises(FileNotFoundError, match="expected math500.jsonl"):
        get_suite("math500").load(data_dir=tmp_path)


def test_bad_rows_name_the_fields(tmp_path):
    (tmp_path / "math500.jsonl").write_text(json.dumps({"question_text": "x"}) + "\n")
    with pytest.raises(ValueError, match="expected fields"):
        get_suite("math500").load(data_dir=tmp_path)
    (tmp_path / "aime24.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="aime24.jsonl:1"):
        get_suite("aime24").load(data_dir=tmp_path)


def test_unknown_suite_did_you_mean():
    with pytest.raises(ValueError, match="Did you mean 'math500'"):
        resolve_suites("math50")
    with pytest.raises(ValueError, match="no suites given"):
        resolve_suites(" , ")


def test_duplicate_registration_refused():
    from harness.registry import DuplicateNameError

    with pytest.raises(DuplicateNameError):
        SUITES.register("aime24", object())


def test_pocket_suites_use_the_task_verifier():
    pytest.importorskip("harness.backends.pocket.tasks")
    from harness.evals.evaluate import score_suite

    suite = resolve_suites("pocket_arith")[0]
    problems = suite.load(limit=3)
    assert problems[0]["prompt_text"] == problems[0]["problem"]  # raw task prompt
    responses = {p["id"]: [p["answer"] if i != 1 else "-1"] for i, p in enumerate(problems)}
    result, graded = score_suite(suite, problems, responses, suite.protocol)
    assert result["metrics"]["avg@1"] == pytest.approx(2 / 3)
    assert [g["correct"] for g in graded] == [True, False, True]
