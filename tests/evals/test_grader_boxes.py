"""Several boxes (issue 30): a gold's boxes are one answer; responses: last box (default) or joined boxes.

Expected joins are worked out by hand from math-verify's rule (docs/grading.md, "Boxes"); the joined verdicts are
also checked against raw math-verify reading the same response, since "joined" must join the way it does."""

import json

import pytest

pytest.importorskip("math_verify")

from harness.cli import main
from harness.evals.math_grader import (
    MathGraderPool,
    compare_box_rules,
    extract_answer,
    extract_final_boxes,
    extract_last_boxed,
    gold_answer,
    grade_math,
    normalize_answer,
)

PRIMES_GOLD = r"\boxed{2}, \boxed{3}, \boxed{5}, \boxed{7}, \boxed{13}"


@pytest.mark.parametrize(
    "gold,joined",
    [
        (r"\boxed{1}\boxed{2}", "1, 2"),
        (PRIMES_GOLD, "2, 3, 5, 7, 13"),
        (r"The roots are $\boxed{1}$ and $\boxed{-2}$.", "1, -2"),
        (r"\boxed{5} ... so again \boxed{5}", "5"),  # a repeat counts once
        (r"\boxed{\boxed{5}}", "5"),  # a box in a box: its own boxes
        (r"\boxed{x}", "x"),
        ("5", "5"),
        ("1, 2", "1, 2"),
    ],
)
def test_gold_answer_joins_every_box(gold, joined):
    assert gold_answer(gold) == joined


def test_normalize_answer_of_a_multi_box_gold():
    assert normalize_answer(r"\boxed{1}\boxed{2}") == "1, 2"
    assert normalize_answer(r"\boxed{\boxed{5}}") == "5"
    assert normalize_answer(r"\boxed{1}\boxed{22}") == "1, 22"  # a list, never the decimal comma 1,22


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        ("1, 2", r"\boxed{1}\boxed{2}", True),  # issue: the old grader kept only the last gold box, 2
        (r"\{2, 1\}", r"\boxed{1}\boxed{2}", True),
        ("2", r"\boxed{1}\boxed{2}", False),
        ("2, 3, 5, 7, 13", PRIMES_GOLD, True),
        ("13, 7, 5, 3, 2", PRIMES_GOLD, True),
        ("13", PRIMES_GOLD, False),
        ("2, 3, 5, 7", PRIMES_GOLD, False),
    ],
)
def test_multi_box_gold_verdicts(pred, gold, expected):
    assert grade_math(f"The answer is \\boxed{{{pred}}}.", gold).correct is expected


# (response, its final answer joined the way math-verify joins it)
JOINS = [
    (r"\boxed{1} and \boxed{-2}", "1, -2"),
    (r"$\boxed{1}$ and $\boxed{-2}$", "1, -2"),  # between = "$ and $": under 10 characters
    (r"\boxed{(1, 2)}, \boxed{(2, 1)}, \boxed{(3, 3)}", "(1, 2), (2, 1), (3, 3)"),
    (r"\boxed{4} or \boxed{5}", "4, 5"),
    # 36 characters holding a comma, different contents: math-verify joins a hedge too
    (r"\boxed{3}. Hmm wait, let me recheck. So the answer is \boxed{4}", "3, 4"),
    (r"\boxed{3} is what I first thought but recheck: \boxed{4}", "4"),  # 40 characters, no separator
    (r"\boxed{2} First attempt, then much longer reasoning that goes on and on and on for a while. \boxed{7}", "7"),
    (r"\boxed{5} and again, \boxed{5}", "5"),  # same content, 13 characters apart: not joined
    (r"\boxed{5}\boxed{5}", "5"),  # adjacent repeat counts once
    (r"\boxed{1} and \boxed{2", "1"),  # an unclosed box is never an answer (math-verify: the rest of the text)
    (r"\boxed{x+\boxed{4}}", "4"),  # the last box to start; the enclosing one ends the walk
    ("no box at all", None),
]


@pytest.mark.parametrize("response,joined", JOINS)
def test_extract_final_boxes(response, joined):
    assert extract_final_boxes(response) == joined
    assert extract_answer(response, "joined") == joined
    assert extract_answer(response, "last") == extract_last_boxed(response)


@pytest.mark.parametrize(
    "response,gold,last,joined",
    [
        (r"\boxed{1} and \boxed{-2}", "1, -2", False, True),  # issue: one box per solution
        (r"\boxed{(1, 2)}, \boxed{(2, 1)}", "(1, 2), (2, 1)", False, True),
        (r"\boxed{4} or \boxed{5}", "5", True, False),  # the hedge the last-box rule lets through
        (r"\boxed{3}. Hmm wait, let me recheck. So the answer is \boxed{4}", "4", True, False),
        (r"\boxed{3} is what I first thought but recheck: \boxed{4}", "4", True, True),
        (r"\boxed{7}", "7", True, True),
    ],
)
def test_box_rules_and_math_verify(response, gold, last, joined):
    from math_verify import LatexExtractionConfig, parse, verify

    assert grade_math(response, gold).correct is last  # default = last box
    assert grade_math(response, gold, boxes="last").correct is last
    assert grade_math(response, gold, boxes="joined").correct is joined
    raw = verify(parse("\\boxed{" + gold + "}", [LatexExtractionConfig()]), parse(response))
    assert raw is joined  # joined = what raw math-verify concludes from the same response


def test_unknown_box_rule_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown box rule 'first'; allowed: last, joined"):
        grade_math(r"\boxed{1}", "1", boxes="first")
    with pytest.raises(ValueError, match="allowed: last, joined"):
        MathGraderPool(workers=1, boxes="all")


def test_pool_joined_matches_serial():
    pairs = [(r"\boxed{1} and \boxed{-2}", "1, -2"), (r"\boxed{4} or \boxed{5}", "5"), (r"\boxed{9}", "9")]
    with MathGraderPool(workers=2, timeout_s=20, boxes="joined") as pool:
        verdicts = pool.grade(pairs)
    assert [v["correct"] for v in verdicts] == [True, False, True]
    assert [v["pred"] for v in verdicts] == ["1, -2", "4, 5", "9"]


def test_compare_box_rules_counts_changed_verdicts():
    rows = [
        {"response": r"\boxed{1} and \boxed{-2}", "answer": "1, -2", "correct": False},  # gained
        {"response": r"\boxed{4} or \boxed{5}", "answer": "5", "correct": True},  # lost
        {"response": r"\boxed{7}", "answer": "7", "correct": True},
        {"response": "no box", "answer": "3", "correct": False},
        {"response": r"\boxed{2, 3}", "answer": r"\boxed{2}, \boxed{3}", "correct": True},
    ]
    counts = compare_box_rules(rows, workers=1)
    assert counts == {"default": "last", "rows": 5, "changed": 2, "gained": 1, "lost": 1}
    assert [r["correct_joined"] for r in rows] == [True, False, True, False, True]


# responses replayed from a generations file, so `harness eval` grades them without generating (a real resume)
EVAL_ROWS = [  # (gold, response, last-box verdict, joined verdict)
    ("1, -2", r"x^2+x-2=0 gives \boxed{1} and \boxed{-2}", False, True),
    ("5", r"\boxed{4} or \boxed{5}", True, False),
    ("7", r"so \boxed{7}", True, True),
    (r"\boxed{2}, \boxed{3}", r"\boxed{2, 3}", True, True),
    ("3", "no idea", False, False),
]


def test_harness_eval_reports_the_box_rule_disagreements(tiny_model, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    with open(data / "math500.jsonl", "w") as f, open(out / "math500.generations.jsonl", "w") as g:
        for i, (gold, response, _, _) in enumerate(EVAL_ROWS):
            f.write(json.dumps({"problem": f"q{i}", "answer": gold, "unique_id": f"b/{i}"}) + "\n")
            g.write(json.dumps({"id": f"b/{i}", "sample": 0, "prompt": f"q{i}", "response": response}) + "\n")
    args = ["eval", "--model", tiny_model, "--suites", "math500", "--data-dir", str(data), "--out", str(out)]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["math500"]
    assert res["resumed_samples"] == len(EVAL_ROWS)  # nothing was generated
    assert res["box_rules"] == {"default": "last", "rows": 5, "changed": 2, "gained": 1, "lost": 1}
    assert res["metrics"]["avg@1"] == pytest.approx(3 / 5)  # the official last-box verdicts
    graded = [json.loads(line) for line in (out / "math500.graded.jsonl").read_text().splitlines()]
    assert [(r["correct"], r["correct_joined"]) for r in graded] == [(la, jo) for _, _, la, jo in EVAL_ROWS]
    assert "math500: last box vs joined boxes: 2 of 5 verdicts differ" in capsys.readouterr().out


def test_harness_grade_takes_the_box_rule(tmp_path):
    """``harness grade --boxes joined`` re-grades saved generations under math-verify's joined-boxes rule."""
    row = {"id": "q1", "response": "The roots are \\boxed{1} and \\boxed{-2}.", "answer": "1, -2"}
    src = tmp_path / "g.jsonl"
    src.write_text(json.dumps(row) + "\n")
    verdicts = {}
    for rule in ("last", "joined"):
        out = tmp_path / f"{rule}.jsonl"
        assert main(["grade", "--input", str(src), "--output", str(out), "--workers", "1", "--boxes", rule]) == 0
        verdicts[rule] = json.loads(out.read_text().splitlines()[0])["correct"]
    assert verdicts == {"last": False, "joined": True}
