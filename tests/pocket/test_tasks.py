"""Exact verifiers (hand-checked cases) and deterministic, disjoint train/test splits."""

import json

import pytest

from harness.backends.pocket.tasks import make_task, safe_eval


def test_countdown_verifier_hand_cases():
    t = make_task("countdown", test_size=20)
    p = {"prompt": "3 5 7 to 22:", "answer": "3*5+7", "numbers": [3, 5, 7], "target": 22}
    assert t.verify("3*5+7", p) == 1.0
    assert t.verify("7+5*3", p) == 1.0  # another correct expression
    assert t.verify(" 5*3+7 ", p) == 1.0  # surrounding whitespace is fine
    assert t.verify("3*(5+7)", p) == 0.0  # = 36
    assert t.verify("22", p) == 0.0  # does not use the numbers
    assert t.verify("3*5+7+0", p) == 0.0  # uses a number that is not given
    assert t.verify("3*5+7*1", p) == 0.0
    assert t.verify("15+7", p) == 0.0  # right value, wrong numbers
    assert t.verify("3*5+", p) == 0.0 and t.verify("", p) == 0.0 and t.verify("__import__('os')", p) == 0.0
    assert safe_eval("2*(3-5)") == -4 and safe_eval("2**3") is None and safe_eval("8/2") is None


def test_arith_verifier_and_problem_format():
    t = make_task("arith", test_size=50, options={"digits": 2, "ops": "+-"})
    assert t.verify("85", {"prompt": "37+48=", "answer": "85"}) == 1.0
    assert t.verify("86", {"prompt": "37+48=", "answer": "85"}) == 0.0
    assert t.verify("-16", {"prompt": "42-58=", "answer": "-16"}) == 1.0
    for p in t.train[:50]:
        a, op, b = p["prompt"][:-1].partition("+") if "+" in p["prompt"] else p["prompt"][:-1].partition("-")
        assert int(p["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b))


@pytest.mark.parametrize("name", ["arith", "countdown"])
def test_splits_are_deterministic_and_disjoint(name):
    a, b = make_task(name, test_size=40), make_task(name, test_size=40)
    assert a.test == b.test and a.train[:100] == b.train[:100]
    assert len(a.test) == 40
    test_prompts = {p["prompt"] for p in a.test}
    assert not test_prompts & {p["prompt"] for p in a.train}
    assert all(a.verify(a.sft_answer(p), p) == 1.0 for p in a.test)  # the supervised answer is correct


def test_jsonl_task(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"q{i}", "answer": str(i)}) for i in range(20)) + "\n")
    t = make_task(str(path), test_size=5)
    assert len(t.test) == 4 and len(t.train) == 16  # test capped at a fifth of the file
    p = {"prompt": "q", "answer": "12"}
    assert t.verify(" 12 ", p) == 1.0 and t.verify("13", p) == 0.0
    assert t.verify("so the answer is \\boxed{12}", p) == 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    with pytest.raises(ValueError, match="line 1 needs string 'prompt' and 'answer'"):
        make_task(str(bad))


def test_countdown_ordered_accepts_only_the_one_canonical_answer():
    t = make_task("countdown", test_size=20, options={"n_numbers": 2, "max_number": 5, "ordered": True})
    p = {"prompt": "5 3 to 2:", "answer": "5-3", "numbers": [5, 3], "target": 2}
    assert t.verify("5-3", p) == 1.0 and t.verify(" 5 - 3 ", p) == 1.0  # spaces are ignored
    assert t.verify("(5-3)", p) == 0.0  # same value, not the canonical form
    assert t.verify("-3+5", p) == 0.0 and t.verify("2", p) == 0.0  # right value, other expressions
    # 5 x 5 ordered pairs x 3 ops = 75, minus 10 negative differences, minus "2 2 to 4" (2+2 and 2*2): 63 problems
    problems = t.train + t.test
    assert len(problems) == 63 and len(t.test) == 12  # test capped at a fifth
    prompts = {q["prompt"] for q in problems}
    assert "2 2 to 4:" not in prompts and "5 3 to 2:" in prompts and "3 5 to 8:" in prompts
    assert "3 5 to 2:" not in prompts  # 3-5 < 0: only the other order exists
    assert len(prompts) == 63  # one problem per (numbers in order, target)
    for q in problems:  # the stored answer is the only operator that reaches the target
        a, b = q["numbers"]
        assert [a + b, a - b, a * b].count(q["target"]) == 1 and t.verify(q["answer"], q) == 1.0


def test_countdown_ordered_option_is_validated_and_off_by_default():
    assert make_task("countdown", test_size=20).options["ordered"] is False
    with pytest.raises(ValueError, match="task.options.ordered: expected true or false, got 'yes'"):
        make_task("countdown", options={"ordered": "yes"})
