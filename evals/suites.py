"""Benchmark suites: dataset id + fields, prompt template, default protocol, and the grader kind.

Default protocols follow the Entropy-Mechanism paper (Cui et al. 2025, §4 / official ``_validate``): AIME24,
AIME25 and AMC23 sample 32 responses at T=0.6, top-p 1 and report avg@32; every other suite is greedy with
one sample; 8192 new tokens. All of it is overridable (``Protocol.with_overrides``).

Data: a local file always wins over the hub (``--data-dir DIR`` holding ``<suite>.jsonl``/``.jsonl.gz``/
``.json``/``.parquet``, or ``data_file=``); otherwise ``datasets.load_dataset(hf_id, config, split)``.
Rows are converted to ``{"id", "prompt_text", "answer"}`` (math) or ``{"id", "prompt_text", <grading fields>}``
(code). ``fixtures=True`` loads the tiny subsets shipped in ``evals/data/fixtures`` (same field schema as the
hub datasets; for tests and demos, not for numbers).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from harness.io import read_json_rows
from harness.registry import Registry

from .math_grader import extract_last_boxed, gold_answer

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "fixtures"
SUITES: Registry[Suite] = Registry("suite", entry_points="entropy_harness.suites")

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = {
    # Qwen2.5-Math / Entropy-Mechanism style (the instruction the official runs put in the prompt)
    "boxed": "{problem}\n" + BOXED_INSTRUCTION,
    # PRIME's eval/Math prompt
    "prime_math": "{problem}\n\nPresent the answer in LaTex format: \\boxed{Your answer}",
    # raw question (base models / few-shot elsewhere)
    "raw": "{problem}",
    # code, chat models: the function signature to complete
    "code_function": (
        "Complete the following Python function. Return the complete function (with its imports) "
        "in one ```python code block.\n\n```python\n{problem}```"
    ),
    # code, base models: plain completion of the prompt
    "code_completion": "{problem}",
    # code, from a natural-language task (MBPP, KodCode, LiveCodeBench)
    "code_task": ("{problem}\n\nWrite a Python solution. Return the code in one ```python code block."),
    "code_stdio": (
        "{problem}\n\nWrite a Python program that reads the input from standard input and writes the "
        "answer to standard output. Return the code in one ```python code block."
    ),
}


@dataclass(frozen=True)
class Protocol:
    n_samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 8192

    def with_overrides(self, **kw) -> Protocol:
        kw = {k: v for k, v in kw.items() if v is not None}
        p = replace(self, **kw)
        if p.n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {p.n_samples}")
        if p.temperature < 0 or not 0 < p.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {p.temperature}, {p.top_p}")
        if p.n_samples > 1 and p.temperature == 0:
            raise ValueError(f"{p.n_samples} samples at temperature 0 are identical; set --temperature > 0 or --n 1")
        if p.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {p.max_tokens}")
        return p

    @property
    def primary(self) -> str:
        return f"avg@{self.n_samples}"


SAMPLED = Protocol(n_samples=32, temperature=0.6, top_p=1.0, max_tokens=8192)
GREEDY = Protocol()


@dataclass
class Suite:
    name: str
    kind: str  # math | code
    hf_id: str
    split: str
    convert: Callable[[dict, int], dict]
    hf_config: str | None = None
    template: str = "boxed"
    protocol: Protocol = GREEDY
    fields: str = ""  # the fields a local file needs (for error messages)
    note: str = ""
    loader: Callable[[Suite], list[dict]] | None = None  # custom (e.g. a backend's generated task)
    grader: Callable[[list[dict]], list[dict]] | None = None  # its own verifier (rows -> verdicts), else by kind
    exact_answers: bool = False  # its grader's ``pred`` is the canonical answer: maj@k counts equal strings
    revision: str | None = None  # hub commit loaded (datasets.load_dataset(..., revision=)); None: the hub's main
    size: int | None = None  # problems in the hub split (its note's count), for plans made before any data loads

    def format_prompt(self, row: dict, template: str | None = None) -> str:
        tpl = TEMPLATES.get(template or self.template)
        if tpl is None:
            raise ValueError(f"unknown prompt template {template!r}; known: {', '.join(sorted(TEMPLATES))}")
        return tpl.replace("{problem}", str(row["problem"]))

    def load(
        self,
        data_dir: str | Path | None = None,
        data_file: str | Path | None = None,
        fixtures: bool = False,
        limit: int | None = None,
        template: str | None = None,
    ) -> list[dict]:
        """Problems as dicts with ``id``, ``prompt_text`` and grading fields."""
        if self.loader is not None and not (data_dir or data_file or fixtures):
            rows = self.loader(self)
        else:
            raw = self._raw_rows(data_dir, data_file, fixtures)
            rows = []
            for i, r in enumerate(raw):
                try:
                    rows.append(self.convert(r, i))
                except (KeyError, ValueError, TypeError) as e:
                    raise ValueError(
                        f"suite {self.name}: row {i} does not have the expected fields "
                        f"({self.fields}): {type(e).__name__}: {e}"
                    ) from None
        if limit is not None:
            rows = rows[:limit]
        for r in rows:
            r.setdefault("prompt_text", self.format_prompt(r, template or r.get("template")))
            r["id"] = str(r["id"])
        ids = [r["id"] for r in rows]
        if len(set(ids)) != len(ids):
            raise ValueError(f"suite {self.name}: duplicate problem ids in the data")
        return rows

    def planned_size(self, data_dir: str | Path | None = None, fixtures: bool = False) -> int | None:
        """Problems a run will score without loading from the hub: the fixture or local file's rows when one is
        used, else ``size`` (None: unknown, e.g. a backend's generated task)."""
        if fixtures or data_dir:
            try:
                return len(self._raw_rows(data_dir, None, fixtures))
            except (FileNotFoundError, ValueError):
                return self.size
        return self.size

    def _raw_rows(self, data_dir, data_file, fixtures) -> list[dict]:
        if fixtures:
            return read_rows(find_local(FIXTURE_DIR, self.name))
        if data_file:
            return read_rows(Path(data_file))
        if data_dir:
            path = find_local(Path(data_dir), self.name)
            return read_rows(path)
        return self._from_hub()

    def _from_hub(self) -> list[dict]:
        if self.revision is None:
            import sys

            print(
                f"warning: suite {self.name} loads {self.hf_id} at the hub's main (no pinned revision)", file=sys.stderr
            )
        return self.hub_rows(revision=self.revision)

    def hub_rows(self, revision: str | None = None, copy: str | Path | None = None) -> list[dict]:
        """The suite's rows in the hub's fields: ``datasets.load_dataset(hf_id, hf_config, split, revision)``, or
        the same call on ``copy``, a local folder holding the dataset repo's files (``harness stage --source``)."""
        try:
            import datasets

            where = str(copy) if copy is not None else self.hf_id
            ds = datasets.load_dataset(where, self.hf_config, split=self.split, revision=None if copy else revision)
            return [dict(r) for r in ds]
        except Exception as e:  # noqa: BLE001 - offline, gated, renamed: all the same advice
            cfg = f" (config {self.hf_config})" if self.hf_config else ""
            rev = f" at revision {revision}" if revision and copy is None else ""
            where = f"the local copy {copy} of " if copy is not None else ""
            raise FileNotFoundError(
                f"could not load {where}the dataset {self.hf_id}{cfg}{rev} split {self.split!r} for suite "
                f"{self.name}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}. Offline? Put the "
                f"data in DIR/{self.name}.jsonl (fields: {self.fields}) and pass --data-dir DIR"
            ) from None


def find_local(directory: Path, name: str) -> Path:
    for ext in (".jsonl", ".jsonl.gz", ".json", ".parquet"):
        p = directory / f"{name}{ext}"
        if p.exists():
            return p
    raise FileNotFoundError(
        f"no data file for suite {name} in {directory}: expected {name}.jsonl, "
        f"{name}.jsonl.gz, {name}.json or {name}.parquet"
    )


def read_rows(path: Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"data file {path} does not exist")
    name = path.name
    if name.endswith(".parquet"):
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    return read_json_rows(path)


# ------------------------------------------------------------------------------------------------------
# row converters (case-insensitive field lookup: hub copies differ in capitalisation)


def _get(row: dict, *names, default=KeyError):
    low = {k.lower(): v for k, v in row.items()}
    for n in names:
        if n.lower() in low and low[n.lower()] is not None:
            return low[n.lower()]
    if default is KeyError:
        raise KeyError(f"none of {names} in row (has {sorted(row)})")
    return default


def math_row(problem_fields=("problem", "question"), answer_fields=("answer",), id_fields=("id", "unique_id", "idx")):
    def convert(row: dict, i: int) -> dict:
        ans = _get(row, *answer_fields, default=None)
        if ans is None:  # Minerva/MATH style: the answer is boxed in the solution
            sol = _get(row, "solution")
            sol = sol if isinstance(sol, str) else sol[-1]
            if extract_last_boxed(sol) is None:
                raise ValueError("no answer field and no \\boxed{} in the solution")
            ans = gold_answer(sol)  # every box of a curated solution: a multi-part answer keeps all its parts
        if isinstance(ans, list):  # OlympiadBench: list of "$...$"
            ans = ", ".join(str(a).strip().strip("$").strip() for a in ans)
        if isinstance(ans, float) and ans.is_integer():
            ans = int(ans)
        return {"id": _get(row, *id_fields, default=i), "problem": str(_get(row, *problem_fields)), "answer": str(ans)}

    return convert


def olympiad_row(row: dict, i: int) -> dict:
    out = math_row(("question", "problem"), ("final_answer", "answer"))(row, i)
    ctx = _get(row, "context", default=None)
    if ctx:
        out["problem"] = f"{ctx}\n\n{out['problem']}"
    return out


def humaneval_row(row: dict, i: int) -> dict:
    return {
        "id": _get(row, "task_id", "id", default=i),
        "problem": row["prompt"],
        "prompt": row["prompt"],
        "test": row["test"],
        "entry_point": row["entry_point"],
        "format": "humaneval",
    }


def mbpp_row(row: dict, i: int) -> dict:
    tests = row.get("test_list") or []
    text = _get(row, "prompt", "text")
    ep = row.get("entry_point")
    if not ep and tests:
        import re

        m = re.search(r"assert\s+(?:math\.isclose\()?\s*(?:set\()?\s*([A-Za-z_]\w*)\s*\(", tests[0])
        ep = m.group(1) if m else None
    problem = text + ("\nYour code should pass these tests:\n" + "\n".join(tests) if tests else "")
    return {
        "id": _get(row, "task_id", "id", default=i),
        "problem": problem,
        "test_list": list(tests),
        "test_imports": list(row.get("test_imports") or []),
        "test_setup_code": row.get("test_setup_code", ""),
        "test": row.get("test") or "",
        "entry_point": ep,
        "format": "mbpp",
    }


def _decode_lcb_tests(value) -> list:
    if isinstance(value, list):
        return value
    try:
        return json.loads(value)
    except ValueError:
        data = zlib.decompress(base64.b64decode(value.encode("utf-8")))
        return json.loads(_SafeUnpickler(io.BytesIO(data)).load())


class _SafeUnpickler(pickle.Unpickler):
    """LiveCodeBench private tests are a pickled JSON *string*: allow no globals at all."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} from dataset")


def lcb_row(row: dict, i: int) -> dict:
    tests = _decode_lcb_tests(row.get("public_test_cases", "[]")) + _decode_lcb_tests(
        row.get("private_test_cases", "[]") or "[]"
    )
    if "tests" in row:
        tests = _decode_lcb_tests(row["tests"])
    meta = row.get("metadata") or {}
    meta = json.loads(meta) if isinstance(meta, str) else meta
    starter = row.get("starter_code") or ""
    problem = _get(row, "question_content", "problem", "question")
    if starter:
        problem += f"\n\nUse this starter code:\n```python\n{starter}\n```"
    functional = bool(tests) and tests[0].get("testtype") == "functional"
    return {
        "id": _get(row, "question_id", "id", default=i),
        "problem": problem,
        "tests": tests,
        "fn_name": meta.get("func_name") or row.get("fn_name"),
        "format": "lcb",
        "template": "code_task" if functional else "code_stdio",
    }


def kodcode_row(row: dict, i: int) -> dict:
    return {
        "id": _get(row, "question_id", "conversation_id", "id", default=i),
        "problem": _get(row, "question", "problem"),
        "test": row["test"],
        "format": "kodcode",
    }


# Hub revisions of the suites (the commit each suite's load_dataset reads). The pins below were found offline in
# public third-party code and dataset cards that pin them (not downloaded here; each named by two or more independent
# public sources, see docs/data.md); REVISION_TO_FILL marks a suite whose commit could not be found offline: it must
# be filled with the hub commit you evaluate on (a staged sweep's manifest records the one it staged). Until then the
# suite loads the hub's current main and says so (nothing is refused).
REVISION_TO_FILL = None
REV_AIME24 = "8d88b2876a82a080e2f172cc9b25d0d9d2cb4792"  # read with the same split/fields by public loaders
REV_AIME25 = "563bb8404243c5f09de6ec262f2db674fe5bce9b"  # main on 2026-08-11 per a public dataset card (Hub API sha)
REV_AMC23 = "80815d37005feb82cd7f8fbc6901d5d3eff43057"  # public loaders expect 40 rows (question, answer) at it
REV_MATH500 = "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be"  # pinned by a public eval harness
REV_MINERVA = "ee46ddc498933b1977577953250ca5c66be64f96"  # public loaders expect 272 rows (question, answer) at it
REV_OLYMPIADBENCH = "91184b52131e7fc9455fef848035173aea8cc01a"  # OE_TO_maths_en_COMP: 674 rows per public loaders
REV_HUMANEVAL_PLUS = "d32357cf319e50e9c8d8dab5ea876c72b0fd321b"  # a public loader reads test.jsonl at it
REV_MBPP_PLUS = "b2d74c91837c3f2a20c1299ae98133cbe7cfa077"  # 378 rows (evalplus v0.2.0) per public loaders
REV_LIVECODEBENCH = "0fe84c3912ea0c4d4a78037083943e8f0c4dd505"  # pinned by public code (holds test.jsonl..test6.jsonl)


def _register(suite: Suite) -> Suite:
    SUITES.register(suite.name, suite)
    return suite


MATH_FIELDS = "id, problem (or question), answer"
_register(
    Suite(
        "aime24",
        "math",
        "Maxwell-Jia/AIME_2024",
        "train",
        math_row(),
        protocol=SAMPLED,
        fields=MATH_FIELDS,
        note="AIME 2024 I+II, 30 problems",
        revision=REV_AIME24,
        size=30,
    )
)
_register(
    Suite(
        "aime25",
        "math",
        "math-ai/aime25",
        "test",
        math_row(),
        protocol=SAMPLED,
        fields=MATH_FIELDS,
        note="AIME 2025 I+II, 30 problems",
        revision=REV_AIME25,
        size=30,
    )
)
_register(
    Suite(
        "amc23",
        "math",
        "math-ai/amc23",
        "test",
        math_row(),
        protocol=SAMPLED,
        fields=MATH_FIELDS,
        note="AMC 2023, 40 problems (answers stored as floats upstream)",
        revision=REV_AMC23,
        size=40,
    )
)
_register(
    Suite(
        "math500",
        "math",
        "HuggingFaceH4/MATH-500",
        "test",
        math_row(),
        fields=MATH_FIELDS,
        note="MATH-500 (PRM800K split)",
        revision=REV_MATH500,
        size=500,
    )
)
_register(
    Suite(
        "minerva",
        "math",
        "math-ai/minervamath",
        "test",
        math_row(),
        fields=MATH_FIELDS + " (or a solution with \\boxed{})",
        note="Minerva-Math (MIT OCW), 272 problems; NOT lm-eval's minerva_math",
        revision=REV_MINERVA,
        size=272,
    )
)
_register(
    Suite(
        "olympiadbench",
        "math",
        "Hothan/OlympiadBench",
        "train",
        olympiad_row,
        hf_config="OE_TO_maths_en_COMP",
        fields="id, question, final_answer (list), context",
        note="OlympiadBench OE_TO maths en COMP, 674 problems at the pinned commit (the paper's eval file: 675)",
        revision=REV_OLYMPIADBENCH,
        size=674,
    )
)
_register(
    Suite(
        "omnimath",
        "math",
        "KbsdJames/Omni-MATH",
        "test",
        math_row(),
        fields=MATH_FIELDS,
        note="Omni-MATH (4428); its rule-gradable subset is KbsdJames/omni-math-rule",
        revision=REVISION_TO_FILL,
        size=4428,
    )
)
_register(
    Suite(
        "humaneval_plus",
        "code",
        "evalplus/humanevalplus",
        "test",
        humaneval_row,
        template="code_function",
        fields="task_id, prompt, test, entry_point",
        note="HumanEval+ (tests use numpy: the sandbox python needs it for the full set)",
        revision=REV_HUMANEVAL_PLUS,
    )
)
_register(
    Suite(
        "mbpp_plus",
        "code",
        "evalplus/mbppplus",
        "test",
        mbpp_row,
        template="code_task",
        fields="task_id, prompt, test_list, test_imports, test",
        note="MBPP+",
        revision=REV_MBPP_PLUS,
    )
)
_register(
    Suite(
        "livecodebench",
        "code",
        "livecodebench/code_generation_lite",
        "test",
        lcb_row,
        hf_config="release_v5",
        template="code_stdio",
        fields="question_id, question_content, starter_code, public_test_cases, private_test_cases, "
        "metadata (or tests, fn_name)",
        note="LiveCodeBench code generation (lite)",
        revision=REV_LIVECODEBENCH,
    )
)
_register(
    Suite(
        "kodcode",
        "code",
        "KodCode/KodCode-V1",
        "train",
        kodcode_row,
        template="code_task",
        fields="question_id, question, test (pytest file importing solution)",
        note="KodCode (pytest style)",
        revision=REVISION_TO_FILL,
    )
)


def get_suite(name: str) -> Suite:
    return SUITES.get(name)


def list_suites() -> list[str]:
    _ensure_backend_suites()
    return SUITES.names()


def _ensure_backend_suites() -> None:
    """Let every backend register the suites it provides (pocket: ``pocket_<task>``)."""
    from harness.backends import register_suites

    register_suites(SUITES)


def resolve_suites(spec: str | list[str]) -> list[Suite]:
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not names:
        raise ValueError("no suites given; known suites: " + ", ".join(list_suites()))
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:  # scored (and counted) twice otherwise
        raise ValueError(f"suite {twice[0]!r} is listed {names.count(twice[0])} times; list each suite once")
    _ensure_backend_suites()
    return [SUITES.get(n) for n in names]
