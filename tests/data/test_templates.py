"""Which prompts ask for the format the reward reads (the last \\boxed{}), and which templates are refused."""

import pytest

from harness.data.sources import DAPO_PREFIX, DAPO_SUFFIX
from harness.data.templates import format_problem, render, resolve_template

PAPER = "What is 1+1?\n\nPresent the answer in LaTeX format: \\boxed{Your answer}."


@pytest.mark.parametrize(
    "prompt, expected",
    [
        (PAPER, None),
        ("What is 1+1?\nPlease reason step by step, and put your final answer within \\boxed{}.", None),
        ("What is 1+1?", "no_boxed_instruction"),
        (DAPO_PREFIX + "What is 1+1?" + DAPO_SUFFIX, "other_format"),
        # simple-evals' preamble names \boxed only to say it is not needed
        ("What is 1+1?\nRemember ... and you do not need to use a \\boxed command.", "other_format"),
        # a \boxed instruction added to DAPO's raw prompt still asks for the Answer: line too
        (DAPO_PREFIX + "What is 1+1?" + DAPO_SUFFIX + "\nPut it in \\boxed{}.", "other_format"),
    ],
)
def test_format_problem(prompt, expected):
    assert format_problem(prompt) == expected


def test_the_paper_template_renders_the_problem_then_the_instruction():
    name, text = resolve_template("paper")
    assert name == "paper"
    assert render(text, "What is 1+1?") == PAPER


def test_a_custom_template_holding_problem_and_a_box_is_accepted():
    assert resolve_template("Q: {problem}\nBox the answer: \\boxed{}") == (
        "custom",
        "Q: {problem}\nBox the answer: \\boxed{}",
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{problem}", "does not ask for the answer in \\boxed{}"),
        ("{problem}\nThe last line should be Answer: $Answer", "asks for another answer format"),
        ("{problem} and {problem} \\boxed{}", "exactly once"),
        ("papper", "unknown template 'papper'"),
    ],
)
def test_templates_that_cannot_be_scored_are_refused(spec, message):
    with pytest.raises(ValueError, match=None) as e:
        resolve_template(spec)
    assert message in str(e.value)
    assert "\n" not in str(e.value)
