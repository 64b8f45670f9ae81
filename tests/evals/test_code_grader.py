"""Code formats: HumanEval(+), MBPP(+), LiveCodeBench (stdin and call-based), KodCode (pytest style)."""

import json
from pathlib import Path

import pytest

from harness.evals.code_grader import build_job, detect_format, extract_code, grade_code_many, outputs_match
from harness.evals.sandbox import Limits, Sandbox
from harness.evals.suites import get_suite

FIX = Path(__file__).resolve().parents[2] / "evals" / "data" / "fixtures"


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(limits=Limits(wall_s=8, cpu_s=8), workers=2)
    yield sb
    sb.close()


def raw(name):
    return [json.loads(line) for line in (FIX / f"{name}.jsonl").read_text().splitlines()]


def test_extract_code():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone") == "def f():\n    return 1\n"
    two = "```python\ndef g(): pass\n```\ntext\n```python\ndef f(): return 2\n```"
    assert extract_code(two) == "def f(): return 2\n"
    assert extract_code(two, entry_point="g") == "def g(): pass\n"  # prefer the block defining the entry point
    assert extract_code("    return x\n") == "    return x\n"  # completion style: raw
    assert extract_code("```python\ndef f():\n    return 3") == "def f():\n    return 3"  # cut-off fence


def test_detect_format_and_bad_format():
    assert detect_format({"entry_point": "f", "test": ""}) == "humaneval"
    assert detect_format({"test_list": []}) == "mbpp"
    assert detect_format({"tests": []}) == "lcb"
    assert detect_format({"test": "from solution import f"}) == "kodcode"
    with pytest.raises(ValueError, match="allowed: humaneval, mbpp, lcb, kodcode"):
        detect_format({"format": "java"})
    with pytest.raises(ValueError, match="cannot tell the code format"):
        detect_format({"id": 1, "response": "x"})


def test_outputs_match_like_livecodebench():
    assert outputs_match("3\n", "3")
    assert outputs_match("1 2 \n3\n\n", "1 2\n3")
    assert outputs_match("0.50", "0.5")  # decimal tokens
    assert not outputs_match("3", "4")
    assert not outputs_match("1\n2", "1")
    assert not outputs_match("abc", "abd")


def test_humaneval_completion_and_full_function(sandbox):
    row = get_suite("humaneval_plus").load(fixtures=True)[0]
    canonical = raw("humaneval_plus")[0]["canonical_solution"]
    full = "```python\nfrom typing import List\n\ndef has_close_elements(numbers, threshold):\n" + canonical + "```"
    no_imports = (
        "```python\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n" + canonical + "```"
    )
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    items = [{**row, "response": r} for r in (canonical, full, no_imports, wrong, "")]
    v = grade_code_many(items, sandbox)
    assert [x["status"] for x in v] == ["passed", "passed", "passed", "failed", "failed"], v
    files, job, _ = build_job(items[2])
    assert files["prog.py"].startswith("from typing import List")  # prompt imports carried over


def test_fixture_suites_canonical_pass_and_wrong_fail(sandbox):
    items, expected = [], []
    for name, sol_key in (("humaneval_plus", "canonical_solution"), ("mbpp_plus", "code"), ("kodcode", "solution")):
        rows = get_suite(name).load(fixtures=True)
        for row, r in zip(rows, raw(name)):
            items += [
                {**row, "response": f"```python\n{r[sol_key]}\n```"},
                {**row, "response": "```python\ndef unrelated():\n    return 0\n```"},
            ]
            expected += [True, False]
    verdicts = grade_code_many(items, sandbox)
    assert [v["correct"] for v in verdicts] == expected, verdicts


def test_mbpp_plus_extra_tests_run(sandbox):
    row = get_suite("mbpp_plus").load(fixtures=True)[1]
    # passes the three base tests but not the plus test (37 is prime)
    cheat = "def is_not_prime(n):\n    return n != 2\n"
    v = grade_code_many([{**row, "response": cheat}], sandbox)[0]
    assert v["status"] == "failed" and "AssertionError" in v["detail"]


def test_livecodebench_stdin_and_functional(sandbox):
    stdin_row, call_row = get_suite("livecodebench").load(fixtures=True)
    assert len(stdin_row["tests"]) == 2 and call_row["fn_name"] == "twoSum"
    two_sum = (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, v in enumerate(nums):\n            if target - v in seen:\n"
        "                return [seen[target - v], i]\n            seen[v] = i\n"
    )
    items = [
        {**stdin_row, "response": "a, b = map(int, input().split())\nprint(a + b)\n"},
        {**stdin_row, "response": "import sys\nprint(sum(map(int, sys.stdin.read().split())))\nsys.exit(0)\n"},
        {**stdin_row, "response": "print(3)\n"},  # passes the public case only
        {**stdin_row, "response": "while True:\n    pass\n"},
        {**call_row, "response": f"```python\n{two_sum}```"},
        {**call_row, "response": "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n"},
        {**call_row, "response": "x = 1\n"},
    ]
    v = grade_code_many(items, sandbox)
    assert [x["status"] for x in v] == ["passed", "passed", "failed", "timeout", "passed", "failed", "failed"], v
    assert "case 1: wrong answer" in v[2]["detail"]
    assert "no function 'twoSum'" in v[6]["detail"]


def test_kodcode_needs_tests_to_run(sandbox):
    row = get_suite("kodcode").load(fixtures=True)[0]
    items = [
        {**row, "response": "def reverse_string(s):\n    return s[::-1]\n"},
        {**row, "test": "from solution import reverse_string\n", "response": "def reverse_string(s): return s"},
        {**row, "response": "import os\nos._exit(0)\n"},
    ]
    v = grade_code_many(items, sandbox)
    assert [x["status"] for x in v] == ["passed", "failed", "failed"], v
    assert "no tests ran" in v[1]["detail"]


def test_malformed_item_is_an_error_not_a_crash(sandbox):
    v = grade_code_many(
        [
            {"id": "x", "response": "print(1)", "format": "lcb", "tests": []},
            {
                "id": "y",
                "prompt": "def f():\n",
                "response": "    return 1\n",
                "test": "def check(c):\n    assert c() == 1\n",
                "entry_point": "f",
            },
        ],
        sandbox,
    )
    assert v[0]["status"] == "error" and "no tests" in v[0]["detail"]
    assert v[1]["status"] == "passed"


def test_kodcode_under_real_pytest_with_a_venv_interpreter():
    """A venv interpreter (here the test's own, with pytest and numpy) works inside the chroot: its prefix is
    bound read-only, so even a python under root's 0700 home runs as the sandbox uid."""
    import sys

    from harness.evals.code_grader import build_job, classify

    pytest.importorskip("numpy")
    row = get_suite("kodcode").load(fixtures=True)[1]
    sol = raw("kodcode")[1]["solution"]
    with Sandbox(python=sys.executable, workers=1) as sb:
        files, job, ctx = build_job({**row, "response": sol})
        res = sb.run(files, job)
        assert res.report["runner"] == "pytest" and res.report["passed"] == 4, res.report
        assert classify(res, ctx)["status"] == "passed"
        np_prog = sb.run({"prog.py": "import numpy as np\nprint(np.arange(3).sum())\n"}, {"mode": "script"})
        assert np_prog.report == {"ok": True} and np_prog.stdout.strip() == "3"
        bad = build_job({**row, "response": "def safe_div(a, b):\n    return a / b\n"})
        assert classify(sb.run(bad[0], bad[1]), bad[2])["status"] == "failed"
