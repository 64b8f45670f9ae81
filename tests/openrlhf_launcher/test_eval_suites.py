"""In-loop eval on OpenRLHF from harness suites (``eval.suites``), pure Python: the flags, the refusals at load, and
the JSONL the launcher renders (prompts exactly as the suite's template writes them, answers, datasource)."""

import json

import pytest

from harness.backends.openrlhf import bridge, evalset, launch
from harness.backends.openrlhf.flags import OpenRLHFConfigError, build_plan
from harness.run.config import load_config

MATH = ["aime24", "math500"]


def config(eval_section=None, openrlhf=None):
    cfg = {
        "backend": "openrlhf",
        "method": {"name": "grpo"},
        "model": {"name": "Qwen/Qwen2.5-7B"},
        "task": {"name": "data/dapo.jsonl"},
        "train": {"steps": 10, "micro_batch_size": 2, "max_new_tokens": 256},
        "openrlhf": {"gpus_per_node": 8, **(openrlhf or {})},
    }
    if eval_section is not None:
        cfg["eval"] = eval_section
    return cfg


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def test_suites_become_the_eval_dataset_in_the_run_dir(tmp_path):
    plan = build_plan(config({"every": 4, "n_samples": 8, "temperature": 0.6, "suites": MATH}), tmp_path / "r")
    dataset = str(tmp_path / "r" / "openrlhf_eval.jsonl")
    assert flag(plan.argv, "--eval.dataset") == dataset
    assert flag(plan.argv, "--eval.steps") == "4" and plan.argv.count("--eval.steps") == 1
    assert flag(plan.argv, "--eval.n_samples_per_prompt") == "8" and flag(plan.argv, "--eval.temperature") == "0.6"
    assert plan.plugin["eval"] == {
        "n_samples": 8,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 256,
        "counts": None,
        "dataset": dataset,
        "suites": MATH,
        "fixtures": False,
        "data_dir": None,
        "limit": None,
    }
    assert not (tmp_path / "r").exists()  # building the plan writes nothing; the launcher renders the file


def test_no_in_loop_eval_without_an_eval_section_or_with_every_0(tmp_path):
    for section in (None, {"every": 0, "suites": MATH, "after_training": True}):
        plan = build_plan(config(section), tmp_path / "r")
        assert flag(plan.argv, "--eval.steps") == "-1" and "--eval.dataset" not in plan.argv
        assert plan.plugin["eval"] is None


def test_explicit_eval_dataset_overrides_the_suites(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"prompt": "q", "answer": "1", "datasource": "x"}) + "\n")
    plan = build_plan(config({"every": 2, "suites": MATH}, {"eval_dataset": str(data)}), tmp_path / "r")
    assert flag(plan.argv, "--eval.dataset") == str(data) and plan.plugin["eval"]["counts"] == {"x": 1}


@pytest.mark.parametrize(
    "section, openrlhf, match",
    [
        ({"every": 4, "n_samples": 8}, None, r"eval.suites is empty.*eval.every: 0"),
        ({"every": 4, "suites": ["humaneval_plus"]}, None, r"humaneval_plus are code suites.*openrlhf.reward: math"),
        ({"every": 4, "suites": ["aime24", "mbpp_plus"]}, None, r"mix code and math suites"),
        ({"every": 4, "suites": ["math500"]}, {"reward": "code"}, r"math500 are math suites.*openrlhf.reward: code"),
        ({"every": 4, "suites": ["math500"], "top_p": 0.9}, None, r"eval.top_p: 0.9"),
        ({"every": 4, "suites": ["math500"], "max_new_tokens": 512}, None, r"eval.max_new_tokens: 512"),
        ({"every": 4, "suites": ["math500"], "n_samples": 4, "temperature": 0.0}, None, r"identical samples"),
        ({"every": 4, "suites": ["math500"], "data_dir": "/nonexistent"}, None, r"eval.data_dir: no data file"),
        ({"every": 4, "suites": ["aime2024"]}, None, r"eval.suites.*aime2024"),
    ],
)
def test_an_eval_section_that_cannot_run_is_refused_at_load(section, openrlhf, match):
    with pytest.raises(OpenRLHFConfigError, match=match):
        load_config(config(section, openrlhf))


def test_launcher_renders_each_suite_with_its_template(tmp_path, monkeypatch):
    """The rows the launcher writes, pinned by hand against the shipped fixtures (evals/data/fixtures)."""
    section = {"every": 2, "suites": ["math500", "amc23"], "fixtures": True, "max_problems": 2}
    plan = build_plan(config(section), tmp_path)
    monkeypatch.setenv(launch.PLUGIN_ENV, plan.env[launch.PLUGIN_ENV])
    launch.write_eval_dataset()
    rows = [json.loads(line) for line in (tmp_path / "openrlhf_eval.jsonl").read_text().splitlines()]
    boxed = "\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert [r["datasource"] for r in rows] == ["math500", "math500", "amc23", "amc23"]  # max_problems: 2 per suite
    assert rows[0] == {
        "prompt": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer "
        "in the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$" + boxed,
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "datasource": "math500",
    }
    assert rows[1] == {"prompt": "What is $1+1$?" + boxed, "answer": "2", "datasource": "math500"}
    assert rows[3]["answer"] == "0.75"  # amc23 stores answers as floats upstream; the grader gets the text
    # the bridge counts the problems of each suite from that file when OpenRLHF reports the eval
    payload = bridge.eval_payload({"eval_math500_pass1": 0.5, "eval_amc23_pass1": 0.25}, 2, plan.plugin["eval"])
    assert {s: r["n_problems"] for s, r in payload["suites"].items()} == {"math500": 2, "amc23": 2}


def test_code_suites_carry_their_tests_as_the_label(tmp_path):
    section = {"every": 2, "suites": ["humaneval_plus"], "fixtures": True, "max_problems": 1}
    plan = build_plan(config(section, {"reward": "code"}), tmp_path)
    (row,) = evalset.rows(plan.plugin["eval"])
    label = json.loads(row["answer"])
    assert row["datasource"] == "humaneval_plus" and {"test", "entry_point"} <= set(label)  # reward.py's format
