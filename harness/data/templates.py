"""Prompt templates for prepared training data, and the test that a prompt asks for the format the reward reads.

The reward (``harness.evals.math_grader``, used by both backends) grades only the content of the last ``\\boxed{}``
of a response. A prompt must therefore ask for ``\\boxed{}`` and must not ask for another answer format (DAPO's raw
prompts ask for a final ``Answer: $Answer`` line instead; simple-evals' even says not to use ``\\boxed``).

``paper`` is the prompt of the Entropy-Mechanism paper's Clip-Cov/KL-Cov runs as found in the third-party copy of
the authors' data (``dapo-math-modified.parquet``; /work/shared/reference/entropy_mechanism_reference.md §1.7): one
user message ``<problem>\\n\\nPresent the answer in LaTeX format: \\boxed{Your answer}.``, no system prompt, rendered
by the model's chat template (OpenRLHF ``apply_chat_template: true``).
"""

from __future__ import annotations

PAPER_INSTRUCTION = "Present the answer in LaTeX format: \\boxed{Your answer}."
QWEN_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

TEMPLATES = {
    "paper": "{problem}\n\n" + PAPER_INSTRUCTION,
    # Qwen2.5-Math style (the eval suites' "boxed" template)
    "qwen_boxed": "{problem}\n" + QWEN_INSTRUCTION,
}

BOX_MARK = "\\boxed"
# Instructions that ask for an answer the reward cannot read (found anywhere in a prompt, they make it fail).
OTHER_FORMATS = (
    "Answer: $Answer",
    'on its own line after "Answer:"',
    "do not need to use a \\boxed",
)


def resolve_template(spec: str) -> tuple[str, str]:
    """``(name, text)`` of a named template, or of a custom one (``spec`` holding ``{problem}`` once).

    Refused: an unknown name, a custom text without exactly one ``{problem}``, and any template whose prompts would
    not ask for the answer in ``\\boxed{}``."""
    if spec in TEMPLATES:
        name, text = spec, TEMPLATES[spec]
    elif "{problem}" in spec:
        name, text = "custom", spec
        if text.count("{problem}") != 1:
            raise ValueError(f"--template: {spec!r} must hold {{problem}} exactly once")
    else:
        raise ValueError(
            f"--template: unknown template {spec!r}; give one of {', '.join(sorted(TEMPLATES))} or a text "
            "holding {problem}"
        )
    reason = format_problem(render(text, "x"))
    if reason:
        raise ValueError(
            f"--template {name}: the prompt {FORMAT_REASONS[reason]}; the reward grades only the last \\boxed{{}}"
        )
    return name, text


def render(template: str, problem: str) -> str:
    return template.replace("{problem}", problem)


FORMAT_REASONS = {
    "no_boxed_instruction": "does not ask for the answer in \\boxed{}",
    "other_format": "asks for another answer format (e.g. a final 'Answer: $Answer' line)",
}


def format_problem(prompt: str) -> str | None:
    """None when ``prompt`` asks for the answer in ``\\boxed{}`` and for no other format; else a key of
    ``FORMAT_REASONS``."""
    if any(marker in prompt for marker in OTHER_FORMATS):
        return "other_format"
    if BOX_MARK not in prompt:
        return "no_boxed_instruction"
    return None
