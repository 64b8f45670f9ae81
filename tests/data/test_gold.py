"""Gold answers: the normalisation for the grader, and which answers the grader cannot verify against themselves."""

import pytest

pytest.importorskip("math_verify")

from harness.data.gold import _PLAIN_NUMBER, _parses_to_math, gold_problem, gold_problems, normalise_gold  # noqa: E402


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, ""),
        ("  42 ", "42"),
        ("$7$", "7"),
        ("10{,}000", "10000"),
        ("025", "25"),
        (27.0, "27"),
        ("\\boxed{5}", "5"),
        ("\\begin{pmatrix}\n1 \\\\\n2\n\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
        ("\\frac{3}{4}", "\\frac{3}{4}"),
    ],
)
def test_normalise_gold(raw, expected):
    assert normalise_gold(raw) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("42", None),
        ("\\frac{3}{4}", None),
        ("(1, 2)", None),
        ("[2, 5)", None),
        ("\\{-2, 2\\}", None),
        ("\\text{yes}", None),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", None),
        ("", "empty_answer"),
        ("   ", "empty_answer"),
        ("54}", "unboxable"),  # \boxed{54}} reads back as 54
        ("\\frac{1}{2", "unboxable"),  # the box never closes
        ("\\sqrt{}", "unparseable"),  # math-verify returns only the string
        ("???", "unparseable"),
    ],
)
def test_gold_problem(answer, expected):
    assert gold_problem(answer) == expected


def test_the_worker_pool_gives_the_same_verdicts_in_order():
    answers = ["1", "", "\\frac{1}{2}", "54}", "\\sqrt{}", "7", "x^2 - 1", "???", "3.14", "(1, 2)"]
    expected = [None, "empty_answer", None, "unboxable", "unparseable", None, None, "unparseable", None, None]
    assert gold_problems(answers, workers=2, chunk=2) == expected
    assert gold_problems(answers, workers=1) == expected


@pytest.mark.parametrize("number", ["0", "7", "-12", "+3", "1275", "3.14", "-0.5", "12345678901234567890"])
def test_plain_numbers_skip_a_parse_that_always_succeeds(number):
    assert _PLAIN_NUMBER.match(number) and _parses_to_math(number)


@pytest.mark.parametrize("text", ["1,22", "1e5", "3/4", ".5", "5."])
def test_other_numbers_are_parsed(text):
    assert not _PLAIN_NUMBER.match(text)
