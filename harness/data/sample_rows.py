"""Rows of the small source files shipped in harness/data/samples/ (rebuild: python -m harness.data.sample_rows).

Each file has its source's hub schema (columns, nesting, struct field order, types) with problems written for
this project. They carry the cases the counts must show: DAPO's repeated rows, a problem seen with two answers,
ungradable answers, Eurus coding rows and a null ground truth (as in Eurus-2-RL-Data before its "remove none
ground truth" commit). Field values (uuids, ``split: dummy``) are ours; tests/data/test_samples.py checks the
shipped files hold exactly these rows.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from .sources import DAPO_PREFIX, DAPO_SUFFIX, EURUS_SUFFIX, SAMPLES_DIR

EURUS_SYSTEM = (
    "\nWhen tackling complex reasoning tasks, you have access to the following actions. Use them as needed to "
    "progress through your thought process.\n\n[ASSESS]\n\n[ADVANCE]\n\n[VERIFY]\n\n[SIMPLIFY]\n\n[SYNTHESIZE]"
    "\n\n[PIVOT]\n\n[OUTPUT]\n\nYou should strictly follow the format below:\n\n[ACTION NAME]\n\n# Your action "
    "step 1\n\n# Your action step 2\n\n# Your action step 3\n\n...\n\nNext action: [NEXT ACTION NAME]\n\n"
)

# (problem, integer answer); answers worked out by hand in the comments
DAPO_PROBLEMS = [
    ("Find the remainder when $2^{10}$ is divided by $7$.", "2"),  # 1024 = 7*146 + 2
    ("How many positive divisors does $360$ have?", "24"),  # 2^3 3^2 5: 4*3*2
    ("What is the sum of the first $20$ positive odd integers?", "400"),  # 20^2
    ("Compute $\\binom{10}{3}$.", "120"),
    ("Find the largest prime factor of $221$.", "17"),  # 13*17
    ("The product of two consecutive positive integers is $506$. What is their sum?", "45"),  # 22*23
    ("What is the least common multiple of $12$, $18$ and $30$?", "180"),
    ("In how many ways can $5$ distinct books be arranged on a shelf?", "120"),
    ("How many integers $n$ with $1 \\le n \\le 100$ are divisible by $3$ or $5$?", "47"),  # 33+20-6
    ("If $x + \\frac{1}{x} = 3$, find $x^2 + \\frac{1}{x^2}$.", "7"),  # 3^2 - 2
    ("What is the value of $1 + 2 + \\cdots + 50$?", "1275"),
    ("Find the units digit of $3^{2023}$.", "7"),  # cycle 3,9,7,1; 2023 = 3 mod 4
    ("A right triangle has legs $9$ and $12$. How long is its hypotenuse?", "15"),
    ("How many diagonals does a convex decagon have?", "35"),  # 10*7/2
    ("What is $\\gcd(84, 126)$?", "42"),
    ("Let $f(x) = 2x + 3$. Find $f(f(1))$.", "13"),  # f(1)=5, f(5)=13
]
DAPO_CONFLICT = ("How many edges does a cube have?", "12", "8")  # the same problem with two answers
DAPO_UNGRADABLE = [
    ("Compute $7 \\times 8$.", ""),  # empty ground truth -> empty_answer
    ("Compute $6 \\times 9$.", "54}"),  # unbalanced brace -> unboxable
]


def _dapo_row(problem: str, answer: str, n: int) -> dict:
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": DAPO_PREFIX + problem + DAPO_SUFFIX, "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": str(uuid.uuid5(uuid.NAMESPACE_URL, f"harness-sample-dapo-{n}"))},
    }


def dapo_rows() -> list[dict]:
    """30 rows: 16 problems, 10 repeats (problems 1-8 once more, 1-2 a third time), the cube problem with two
    answers, two ungradable answers. Expected: kept 16; duplicate 10, conflicting_answer 2, empty_answer 1,
    unboxable 1."""
    items = list(DAPO_PROBLEMS)
    items += DAPO_PROBLEMS[:8]
    items.insert(20, (DAPO_CONFLICT[0], DAPO_CONFLICT[1]))
    items += [(DAPO_CONFLICT[0], DAPO_CONFLICT[2])]
    items += DAPO_PROBLEMS[:2]
    items += DAPO_UNGRADABLE
    return [_dapo_row(p, a, i) for i, (p, a) in enumerate(items)]


# (data_source, problem, ground truth as the hub stores it, answer after normalisation)
EURUS_MATH = [
    ("numina_synthetic_math", "Simplify $\\frac{6}{8}$.", "\\frac{3}{4}", "\\frac{3}{4}"),
    ("numina_cn_k12", "Find the distance between $(0,0)$ and $(2,2)$.", "2\\sqrt{2}", "2\\sqrt{2}"),
    ("numina_cn_k12", "Give the roots of $x^2 - 3x + 2 = 0$ as an ordered pair, smaller first.", "(1, 2)", "(1, 2)"),
    ("numina_synthetic_math", "Write the set of real $x$ with $2 \\le x < 5$ as an interval.", "[2, 5)", "[2, 5)"),
    ("numina_olympiads", "Expand $(x-1)(x+1)$.", "x^2 - 1", "x^2 - 1"),
    ("numina_synthetic_amc", "What is $3 + 4$?", "$7$", "7"),
    ("numina_cn_k12", "How many meters are in $10$ kilometers?", "10{,}000", "10000"),
    (
        "numina_synthetic_math",
        "Compute $\\begin{pmatrix} 1 \\\\ 0 \\end{pmatrix} + \\begin{pmatrix} 0 \\\\ 2 \\end{pmatrix}$.",
        "\\begin{pmatrix}\n1 \\\\\n2\n\\end{pmatrix}",
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
    ),
    ("numina_amc_aime", "Find $\\sqrt{49}$.", "7", "7"),
    ("numina_synthetic_math", "What is $\\frac{1}{2} + \\frac{1}{3}$?", "\\frac{5}{6}", "\\frac{5}{6}"),
    ("numina_olympiads", "Find $\\log_2 32$.", "5", "5"),
    ("numina_cn_k12", "What is $\\pi$ rounded to two decimal places?", "3.14", "3.14"),
    ("numina_olympiads", "Evaluate $\\lim_{x \\to \\infty} x$.", "\\infty", "\\infty"),
    ("numina_aops_forum", "Find the set of solutions of $x^2 = 4$.", "\\{-2, 2\\}", "\\{-2, 2\\}"),
    ("numina_synthetic_math", "What is $15\\%$ of $200$?", "30", "30"),
    ("numina_cn_k12", "Is $17$ prime? Answer yes or no.", "\\text{yes}", "\\text{yes}"),
]
EURUS_UNGRADABLE = [
    ("numina_olympiads", "Write the value of the expression.", "\\sqrt{}", "unparseable"),
    ("numina_cn_k12", "Find the value of $a$ in the figure.", None, "empty_answer"),
]
EURUS_NO_SUFFIX = ("numina_synthetic_math", "Compute $2^5$.", "32")  # a user message without the suffix
EURUS_CODING = [
    ("codecontests", "Read two integers and print their sum.", {"inputs": ["1 2\n"], "outputs": ["3\n"]}),
    ("apps", "Print the reverse of the input string.", {"inputs": ["abc\n"], "outputs": ["cba\n"]}),
    ("taco", "Print the maximum of the given integers.", {"inputs": ["3\n1 5 2\n"], "outputs": ["5\n"]}),
    ("codeforces", "Print YES if n is even, else NO.", {"inputs": ["4\n"], "outputs": ["YES\n"]}),
    ("codecontests", "Print n factorial.", {"inputs": ["5\n"], "outputs": ["120\n"]}),
    ("apps", "Count the vowels in a word.", {"inputs": ["hello\n"], "outputs": ["2\n"]}),
]


def _eurus_row(data_source, ability, user, truth, n) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"content": EURUS_SYSTEM, "role": "system"}, {"content": user, "role": "user"}],
        "ability": ability,
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {"index": n, "split": "dummy"},
    }


def eurus_rows() -> list[dict]:
    """27 rows: 16 gradable math problems, 2 repeats (problems 1 and 5), 2 ungradable answers, one math row
    without the boxed suffix, 6 coding rows. Expected: kept 17; not_math 6, duplicate 2, unparseable 1,
    empty_answer 1."""
    math = [(ds, p + EURUS_SUFFIX, t) for ds, p, t, _ in EURUS_MATH]
    math += [math[0], math[4]]
    math += [(ds, p + EURUS_SUFFIX, t) for ds, p, t, _ in EURUS_UNGRADABLE]
    math += [EURUS_NO_SUFFIX]
    rows = [("math", ds, user, truth) for ds, user, truth in math]
    coding = [("coding", ds, "Write Python code to solve the task:\n" + p, json.dumps(t)) for ds, p, t in EURUS_CODING]
    for k, row in enumerate(coding):  # spread the coding rows through the file
        rows.insert(3 + 4 * k, row)
    return [_eurus_row(ds, ability, user, truth, n) for n, (ability, ds, user, truth) in enumerate(rows)]


def raw_dapo_prompts() -> list[dict]:
    """The first 12 DAPO problems as a {prompt, answer} file that keeps DAPO's own instruction (no \\boxed{})."""
    return [{"prompt": DAPO_PREFIX + p + DAPO_SUFFIX, "answer": a} for p, a in DAPO_PROBLEMS[:12]]


def dapo_schema():
    import pyarrow as pa

    return _hub_schema([("index", pa.string())])


def eurus_schema():
    import pyarrow as pa

    return _hub_schema([("index", pa.int64()), ("split", pa.string())])


def _hub_schema(extra_info: list):
    """The parquet schema both hub sets share (verl's RL format); ``extra_info`` is where they differ."""
    import pyarrow as pa

    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            ("extra_info", pa.struct(extra_info)),
        ]
    )


def write(out_dir: Path = SAMPLES_DIR) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(dapo_rows(), schema=dapo_schema()), out_dir / "dapo-math-17k.parquet")
    pq.write_table(pa.Table.from_pylist(eurus_rows(), schema=eurus_schema()), out_dir / "eurus-2-rl-math.parquet")
    text = "".join(json.dumps(r) + "\n" for r in raw_dapo_prompts())
    (out_dir / "dapo-math-17k-raw-prompts.jsonl").write_text(text)


if __name__ == "__main__":
    write()
    print(f"wrote the samples to {SAMPLES_DIR}")
