"""The table in docs/grading.md: each deliberate difference from raw math-verify, with its example.

Both columns are checked here: raw math-verify (``verify(parse(gold as a box), parse(response))``, the way its own
tests call it) and ours (``grade_math``). A row whose two verdicts agree would not be a difference, so a change in
math-verify that removes one shows up here. The official grader's column in the docs was measured once (it is not
installed here); the rows that differ only from it are at the end."""

import pytest

pytest.importorskip("math_verify")

from harness.evals.math_grader import grade_math

FAR = " (first part), and after a long explanation of the second part of the question, "

# (docs row, response, gold, box rule, raw math-verify, ours)
VS_MATH_VERIFY = [
    ("M1 no box", "So, the answer is 2+3.", "5", "last", True, False),
    ("M2 last box", r"\boxed{1} and \boxed{-2}", "1, -2", "last", True, False),
    ("M2 joined option", r"\boxed{4} or \boxed{5}", "5", "last", False, True),
    ("M3 \\fbox", r"\fbox{5}", "5", "last", False, True),
    ("M4 gold boxes far apart", r"\boxed{2, 3}", r"\boxed{2}" + FAR + r"\boxed{3}", "last", False, True),
    ("M5 thin-space thousands", r"\boxed{1\,234}", "235", "last", True, False),
    ("M5 space thousands", r"\boxed{1 234}", "1234", "last", False, True),
    ("M6 decimal comma", r"\boxed{0,5}", r"\frac{1}{2}", "last", False, True),
    ("M6 decimal comma gold", r"\boxed{1.22}", "1,22", "last", False, True),
    ("M6 LaTeX decimal comma", r"\boxed{3{,}14}", "3.14", "last", False, True),
    ("M7 both compact", r"\boxed{2,1}", "1,2", "last", True, False),
    ("M8 \\mathrm{e}", r"\boxed{2\mathrm{e}}", "2", "last", True, False),
    ("M8 \\mathrm{i}", r"\boxed{3+2\mathrm{i}}", "5", "last", True, False),
    ("M8 \\mathrm{d}", r"\boxed{2\mathrm{d}}", "2", "last", True, False),
    ("M8 e vs \\mathrm{e}", r"\boxed{e^{2}}", r"\mathrm{e}^{2}", "last", False, True),
    ("M9 exact rationals", r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}", "last", True, False),
    (
        "M9 exact rationals",
        r"\boxed{\frac{1}{3\cdot 2^{2006}}}",
        r"\frac{2^{2005}+1}{3\cdot 2^{2006}}",
        "last",
        True,
        False,
    ),
]

# rows of the docs table where we agree with raw math-verify and differ from the official grader
SAME_AS_MATH_VERIFY = [
    ("O1 joined option = math-verify", r"\boxed{1} and \boxed{-2}", "1, -2", "joined", True, True),
    ("O2 several gold boxes", r"\boxed{1, 2}", r"\boxed{1}\boxed{2}", "last", True, True),
    ("O3 closed box before an unclosed one", r"\boxed{5} so the answer is \boxed{", "5", "last", True, True),
    ("O3 old-style box", r"\boxed 5", "5", "last", True, True),
    ("O4 0,ddd", r"\boxed{0,125}", "125", "last", False, False),
    ("O5 plain-text gold", r"\boxed{\dfrac{\pi}{2}}", "pi/2", "last", False, False),
]


def _raw_math_verify(response: str, gold: str) -> bool:
    from math_verify import LatexExtractionConfig, parse, verify

    g = parse(gold if "\\boxed" in gold else "\\boxed{" + gold + "}", [LatexExtractionConfig()])
    return verify(g, parse(response))


@pytest.mark.parametrize("row,response,gold,rule,raw,ours", VS_MATH_VERIFY + SAME_AS_MATH_VERIFY)
def test_documented_verdicts(row, response, gold, rule, raw, ours):
    assert _raw_math_verify(response, gold) is raw, row
    assert grade_math(response, gold, boxes=rule).correct is ours, row


def test_every_math_verify_row_is_a_difference():
    assert all(raw != ours for *_, raw, ours in VS_MATH_VERIFY)
