"""``gsm_arith``: seeded grade-school arithmetic word problems with exact integer answers, graded on ``\\boxed{}``.

A stand-in for GSM8K that needs no download and fits a 135M instruct model. Each problem is built from a
template (names, items, numbers drawn from ``random.Random(SPLIT_SEED + level)``), so the pool, and the
train/test split (by the base class, fixed seed), are the same on every machine and for every run seed.

Levels (``task.options.levels``, any subset of "1234"; default "1", where SmolLM2-135M-Instruct starts near 20%):
  1. one addition or subtraction, numbers up to 20;
  2. one multiplication or exact division, numbers up to 12 (products up to 144);
  3. two steps (add/subtract then multiply, or multiply then add/subtract), results up to a few hundred;
  4. three steps mixing the above.
The prompt (``shots``, default 1) shows the first ``shots`` worked examples (addition, multiplication,
subtraction) ending in ``\\boxed{}`` before the question;
``verify`` is the harness's math grader (``harness.evals.math_grader.grade_math``: last brace-matched
``\\boxed{}`` + math-verify; no box scores 0), so the training reward is exactly the evaluation verdict. Unlike
GSM8K the answers are always non-negative integers and the wording comes from a fixed set of templates.
"""

from __future__ import annotations

import random

from harness.kernel.fields import opt

from .tasks import SPLIT_SEED, TASKS, Task

INSTRUCTION = "Put your final answer within \\boxed{}."
# worked examples put before the question (``shots``): without them SmolLM2-135M-Instruct boxes almost nothing
EXAMPLES = (
    ("Sam has 2 cats and gets 3 more cats. How many cats does Sam have now?", "2 + 3 = 5. The answer is \\boxed{5}."),
    ("Ana has 4 boxes with 6 pens in each box. How many pens does Ana have?", "4 * 6 = 24. The answer is \\boxed{24}."),
    ("Ben has 9 cards and gives away 4 of them. How many cards are left?", "9 - 4 = 5. The answer is \\boxed{5}."),
)
NAMES = ("Tom", "Anna", "Liam", "Mia", "Noah", "Emma", "Ravi", "Sofia", "Kenji", "Lena", "Omar", "Grace")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "shells", "stamps", "balloons")


def _levels(v) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if isinstance(v, str) and v and set(v) <= set("1234"):
        return None
    return "expected a non-empty string of levels from '1234' (e.g. \"12\")"


def _level1(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b = r.randint(2, 20), r.randint(1, 20)
    if r.random() < 0.5:
        return f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?", a + b
    a, b = max(a, b), min(a, b)
    return f"{name} has {a} {item} and gives away {b} of them. How many {item} does {name} have left?", a - b


def _level2(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b = r.randint(2, 12), r.randint(2, 12)
    if r.random() < 0.5:
        return f"{name} has {a} boxes with {b} {item} in each box. How many {item} does {name} have?", a * b
    return (f"{name} shares {a * b} {item} equally among {a} friends. How many {item} does each friend get?", b)


def _level3(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b, c = r.randint(2, 9), r.randint(2, 12), r.randint(1, 30)
    if r.random() < 0.5:
        return (
            f"{name} buys {a} packs of {item} with {b} {item} in each pack, and already had {c} {item}. "
            f"How many {item} does {name} have in total?",
            a * b + c,
        )
    d = r.randint(1, b - 1)
    return (
        f"{name} has {a} bags with {b} {item} in each bag and takes {d} {item} out of every bag. "
        f"How many {item} are left in the bags?",
        a * (b - d),
    )


def _level4(r: random.Random, name: str, item: str) -> tuple[str, int]:
    a, b, c = r.randint(2, 9), r.randint(2, 9), r.randint(2, 6)
    total = a * b
    d = r.randint(1, total - 1)
    return (
        f"{name} has {a} rows of {item} with {b} {item} in each row, gives {d} {item} to a friend, and then "
        f"buys {c} more packs of 10 {item}. How many {item} does {name} have now?",
        total - d + 10 * c,
    )


LEVELS = {"1": _level1, "2": _level2, "3": _level3, "4": _level4}


def render(question: str, shots: int) -> str:
    """The prompt: ``shots`` worked examples, then the question and ``Answer:`` (shots 0: question + instruction)."""
    if shots == 0:
        return f"{question} {INSTRUCTION}"
    ex = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in EXAMPLES[:shots])
    return f"{ex}Question: {question}\nAnswer:"


def make_problem(level: str, r: random.Random, shots: int = 1) -> dict:
    """One problem ``{"prompt", "answer", "level", "question"}`` drawn from ``r``."""
    text, answer = LEVELS[level](r, r.choice(NAMES), r.choice(ITEMS))
    return {"prompt": render(text, shots), "answer": str(answer), "level": int(level), "question": text}


@TASKS.register("gsm_arith")
class GsmArith(Task):
    """Grade-school arithmetic word problems (levels 1-4), answers graded from the last ``\\boxed{}``."""

    name = "gsm_arith"
    options_schema = {
        "levels": opt("1", "levels drawn from: a string of 1-4 (an integer: its digits)", kind=object, check=_levels),
        "pool": opt(2000, "problems generated before the split", kind=int, low=10, high=100_000),
        "shots": opt(1, "worked examples in each prompt", kind=int, choices=(0, 1, 2, 3)),
    }

    def all_problems(self) -> list[dict]:
        levels = str(self.options["levels"])
        per_level = max(1, self.options["pool"] // len(levels))
        out, seen = [], set()
        for lv in sorted(set(levels)):
            r = random.Random(SPLIT_SEED + int(lv))
            made = 0
            for _ in range(per_level * 20):  # templates repeat: draw until the level has its share of distinct ones
                p = make_problem(lv, r, self.options["shots"])
                if p["prompt"] not in seen:
                    seen.add(p["prompt"])
                    out.append(p)
                    made += 1
                    if made == per_level:
                        break
        return out

    def verify(self, response: str, problem: dict) -> float:
        from harness.evals.math_grader import grade_math

        return 1.0 if grade_math(response, problem["answer"]).correct else 0.0
