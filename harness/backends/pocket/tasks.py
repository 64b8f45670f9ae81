"""Synthetic verifiable tasks for the pocket backend, and JSONL problem files.

Every task yields problems ``{"prompt", "answer"}`` with a deterministic train/test split that does not depend
on the run seed (the split seed is fixed per task), and grades a response with an exact verifier (1.0 / 0.0).

- ``arith``: ``37+48=`` -> ``85`` (options: ``digits`` 1-4, ``ops`` subset of ``+-*``). One right answer.
- ``countdown``: ``3 5 7 to 22:`` -> any expression using each number exactly once with ``+ - *`` and
  parentheses that evaluates to the target (``3*5+7``). Several right answers, so there is entropy to keep.
  Option ``ordered: true`` makes it a one-answer family: the prompt lists the numbers in the order they must be
  used (``5 3 to 2:``), the only accepted response is ``a op b [op c ...]`` without parentheses (spaces ignored),
  and problems where two operator sequences reach the target (``2+2`` = ``2*2``) are dropped.
- a path to a ``.jsonl`` file of ``{"prompt", "answer"}``: a response holding ``\\boxed{}`` is graded by the
  math grader of ``evals`` (math-verify) when installed; otherwise by exact match after whitespace
  normalisation (the answer of a tiny model is usually a bare string).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import random
import re
from collections import Counter
from pathlib import Path

from harness.errors import ConfigError, did_you_mean, suggestion
from harness.io import jsonl_lines
from harness.kernel.fields import as_recorded, check_value, default_of, opt, spec
from harness.registry import Registry

TASKS = Registry(
    "task", autoload=["harness.backends.pocket.gsm"], entry_points="entropy_harness.tasks"
)  # gsm_arith registers itself on first lookup
SPLIT_SEED = 20250528  # fixed: the split never depends on the run seed


def _option(declared) -> tuple:
    """(default, metadata) of a task option: declared with ``opt``, or a plugin's ``(default, check)`` pair from
    before the one field language (``check(value) -> None`` or the text of what is allowed; no type of its own)."""
    if isinstance(declared, dataclasses.Field):
        return default_of(declared), spec(declared)
    default, check = declared
    return default, {"check": check}


def _check_options(task: str, options: dict, allowed: dict) -> tuple[dict, dict]:
    """(every option typed, defaults for the ones not given; the given ones as the config records them). Unknown
    keys get a did-you-mean; values are checked like every config field (``harness.kernel.fields``)."""
    declared = {k: _option(v) for k, v in allowed.items()}
    typed, recorded = {k: d for k, (d, _) in declared.items()}, {}
    for k, v in (options or {}).items():
        if k not in allowed:
            hint = suggestion(k, allowed)
            raise ConfigError(
                f"task.options.{k}: unknown option for task {task!r}.{hint} Allowed: {', '.join(allowed) or '(none)'}"
            )
        typed[k] = check_value(v, declared[k][1], f"task.options.{k}")
        recorded[k] = as_recorded(v, typed[k])
    return typed, recorded


class Task:
    name = ""
    options_schema: dict = {}

    def __init__(self, test_size: int = 200, options: dict | None = None):
        self.options = _check_options(self.name, options or {}, self.options_schema)[0]
        problems = self.all_problems()
        random.Random(SPLIT_SEED).shuffle(problems)
        n_test = min(test_size, max(1, len(problems) // 5))
        self.test = problems[:n_test]
        self.train = problems[n_test:]
        if not self.train:
            raise ConfigError(f"task {self.name!r}: no training problems left after the test split")

    def all_problems(self) -> list[dict]:
        raise NotImplementedError

    def verify(self, response: str, problem: dict) -> float:
        raise NotImplementedError

    def answer_key(self, response: str):
        """maj@k's vote of a response (evals/metrics.py ``majority_correct``): a key equal for responses that
        ``verify`` grades alike on a problem, None for no answer (no vote). Default: the stripped text, which is
        what ``Arith.verify`` compares."""
        return response.strip() or None

    def sft_answer(self, problem: dict) -> str:
        return problem["answer"]


@TASKS.register("arith")
class Arith(Task):
    """Multi-digit integer arithmetic: ``a op b=`` -> the exact result."""

    name = "arith"
    options_schema = {
        "digits": opt(2, "digits of each operand", kind=int, low=1, high=4),
        "ops": opt(
            "+-",
            "operators drawn from",
            kind=str,
            check=lambda v: None if v and set(v) <= set("+-*") else "expected a non-empty subset of '+-*'",
        ),
    }

    def all_problems(self):
        d, ops = self.options["digits"], self.options["ops"]
        n = 10**d
        rng = random.Random(SPLIT_SEED + d)
        pairs = [(a, b) for a in range(n) for b in range(n)]
        if len(pairs) > 20000:  # 3-4 digits: a fixed sample of the space
            pairs = rng.sample(pairs, 20000)
        out = []
        for a, b in pairs:
            for op in ops:
                val = a + b if op == "+" else a - b if op == "-" else a * b
                out.append({"prompt": f"{a}{op}{b}=", "answer": str(val)})
        return out

    def verify(self, response, problem):
        return 1.0 if response.strip() == problem["answer"] else 0.0


_ALLOWED_EXPR = re.compile(r"^[0-9+\-*() ]+$")


@functools.lru_cache(maxsize=1 << 16)  # rewards re-read the same few answers thousands of times
def safe_eval(expr: str):
    """Integer value of an expression of ints, + - * and parentheses; None for anything else."""
    if not expr or len(expr) > 64 or not _ALLOWED_EXPR.match(expr):
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError):
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            lhs, r = ev(node.left), ev(node.right)
            if lhs is None or r is None:
                return None
            return lhs + r if isinstance(node.op, ast.Add) else lhs - r if isinstance(node.op, ast.Sub) else lhs * r
        return None

    return ev(tree)


@TASKS.register("countdown")
class Countdown(Task):
    """Reach the target with each given number exactly once (``+ - *``, parentheses allowed)."""

    name = "countdown"
    options_schema = {
        "n_numbers": opt(3, "numbers to combine", kind=int, low=2, high=4),
        "max_number": opt(9, "largest number", kind=int, low=2, high=20),
        "ordered": opt(
            False, "one answer per problem: the numbers in the prompt's order (see the docstring)", kind=bool
        ),
    }

    def all_problems(self):
        if self.options["ordered"]:
            return self._ordered_problems()
        k, hi = self.options["n_numbers"], self.options["max_number"]
        seen: dict[tuple, dict] = {}
        for nums in itertools.combinations_with_replacement(range(1, hi + 1), k):
            for perm in sorted(set(itertools.permutations(nums))):
                for ops in itertools.product("+-*", repeat=k - 1):
                    expr = str(perm[0]) + "".join(o + str(x) for o, x in zip(ops, perm[1:]))
                    val = safe_eval(expr)
                    if val is None or val < 0:
                        continue
                    key = (nums, val)
                    if key not in seen:
                        seen[key] = {
                            "prompt": f"{' '.join(map(str, nums))} to {val}:",
                            "answer": expr,
                            "numbers": list(nums),
                            "target": val,
                        }
        return [seen[k] for k in sorted(seen)]

    def _ordered_problems(self):
        """One problem per (numbers in order, target) that exactly one operator sequence reaches."""
        k, hi = self.options["n_numbers"], self.options["max_number"]
        found: dict[tuple, list[str]] = {}
        for perm in itertools.product(range(1, hi + 1), repeat=k):
            for ops in itertools.product("+-*", repeat=k - 1):
                expr = str(perm[0]) + "".join(o + str(x) for o, x in zip(ops, perm[1:]))
                val = safe_eval(expr)
                if val is not None and val >= 0:
                    found.setdefault((perm, val), []).append(expr)
        return [
            {"prompt": f"{' '.join(map(str, p))} to {val}:", "answer": exprs[0], "numbers": list(p), "target": val}
            for (p, val), exprs in sorted(found.items())
            if len(exprs) == 1
        ]

    def decision_positions(self, response: str) -> list[int]:
        """Character positions where the response makes a choice: every operator, and in the unordered task also
        the first digit of every number (which number comes next); the ordered task copies its numbers from the
        prompt, so only its operators are choices (docs/mechanism_prereg.md, decision tokens)."""
        out = []
        for i, ch in enumerate(response):
            if ch in "+-*":
                out.append(i)
            elif not self.options["ordered"] and ch.isdigit() and (i == 0 or not response[i - 1].isdigit()):
                out.append(i)
        return out

    def verify(self, response, problem):
        if self.options["ordered"]:
            return 1.0 if re.sub(r"\s+", "", response) == problem["answer"] else 0.0
        expr = response.strip()
        val = safe_eval(expr)
        if val is None or val != problem["target"]:
            return 0.0
        used = Counter(int(t) for t in re.findall(r"\d+", expr))
        return 1.0 if used == Counter(problem["numbers"]) else 0.0

    def answer_key(self, response):
        """Unordered: (value, the numbers used), which is all ``verify`` reads, so ``7*12`` and ``12*7`` vote
        together; an expression that does not evaluate gives no vote. Ordered: the text without spaces."""
        if self.options["ordered"]:
            return re.sub(r"\s+", "", response) or None
        val = safe_eval(response.strip())
        return None if val is None else (val, tuple(sorted(int(t) for t in re.findall(r"\d+", response))))


def _normalise(s: str) -> str:
    s = s.strip()
    m = re.findall(r"\\boxed\{([^{}]*)\}", s)
    if m:
        s = m[-1]
    return re.sub(r"\s+", "", s).rstrip(".")


def _math_grader():
    """``harness.evals.math_grader.grade_math`` (last \\boxed{} + math-verify) when installed, else None."""
    try:
        import math_verify  # noqa: F401  (the grader needs it)

        from harness.evals.math_grader import grade_math
    except Exception:
        return None
    return lambda response, gold: grade_math(response, gold).correct


class JsonlTask(Task):
    """Problems from a JSONL file of ``{"prompt": str, "answer": str}`` (one per line)."""

    name = "jsonl"

    def __init__(self, path: str, test_size: int = 200, options: dict | None = None):
        self.path = Path(path)
        self.grader = None
        self._grader_loaded = False
        super().__init__(test_size, options)

    def all_problems(self):
        out = []
        try:
            lines = jsonl_lines(self.path)
        except ValueError as e:
            raise ConfigError(f"task.name: {e}") from None
        for ln, row in lines:
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "answer" not in row:
                raise ConfigError(f"task.name: {self.path}: line {ln} needs string 'prompt' and 'answer' fields")
            out.append({"prompt": row["prompt"], "answer": str(row["answer"])})
        if len(out) < 2:
            raise ConfigError(f"task.name: {self.path}: needs at least 2 problems, found {len(out)}")
        return out

    def verify(self, response, problem):
        if not self._grader_loaded:
            self.grader, self._grader_loaded = _math_grader(), True
        if self.grader is not None and "\\boxed" in response:
            try:
                return 1.0 if self.grader(response, problem["answer"]) else 0.0
            except Exception:
                pass
        return 1.0 if _normalise(response) == _normalise(problem["answer"]) else 0.0

    def answer_key(self, response):
        """The last ``\\boxed{}``'s content (else the text) without spaces, as ``verify`` compares it without
        math-verify (where math-verify grades, a class votes with its first response's grade)."""
        return _normalise(response) or None


def is_jsonl(name: str) -> bool:
    return name.endswith(".jsonl") or Path(name).is_file()


def check_task(name: str, options: dict | None = None) -> dict:
    """``options`` as the config records them (``_check_options``); ConfigError (with did-you-mean) unless ``name`` is
    a registered task or an existing JSONL file and every option is one of its own."""
    if is_jsonl(name):
        if not Path(name).is_file():
            raise ConfigError(f"task.name: JSONL file not found: {name}")
        if options:
            raise ConfigError(f"task.options: a JSONL task takes no options, got {sorted(options)}")
        return {}
    if name not in TASKS:
        raise ConfigError(
            f"task.name: {did_you_mean(name, TASKS.names(), 'task')}, or a path to a .jsonl file of {{prompt, answer}}"
        )
    cls = TASKS.get(name)
    return _check_options(name, options or {}, cls.options_schema)[1]


def make_task(name: str, test_size: int = 200, options: dict | None = None) -> Task:
    check_task(name, options)
    if is_jsonl(name):
        return JsonlTask(name, test_size, options)
    return TASKS.get(name)(test_size=test_size, options=options)
