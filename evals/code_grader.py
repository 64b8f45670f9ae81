"""Code grading: turn a (problem, response) pair into a sandboxed program and classify the outcome.

Formats (``item["format"]`` or inferred from the fields):

* ``humaneval`` (HumanEval, HumanEval+ OriginFmt): ``prompt, response, test, entry_point`` -> program =
  prompt + completion (or the prompt's imports + a full function the model wrote) + test + ``check(fn)``.
* ``mbpp`` (MBPP, MBPP+): ``response, test_list`` (+ ``test_setup_code``/``test_imports``/``test``).
* ``lcb`` (LiveCodeBench): ``response, tests=[{input, output, testtype: stdin|functional}]``, ``fn_name``
  for functional (LeetCode-style) tests. Outputs are compared here, outside the sandbox, like LCB's
  ``testing_util``: stripped lines, then token-wise decimal equality.
* ``kodcode``: ``response, test`` (pytest file importing ``solution``).

A sample passes only when its tests ran to the end inside the sandbox (see ``_sandbox_runner``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from .sandbox import ExecResult, Sandbox

FORMATS = ("humaneval", "mbpp", "lcb", "kodcode")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_code(response: str, entry_point: str | None = None) -> str:
    """The program in a response: the last fenced block (preferring one defining ``entry_point``), else all."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(response or "")]
    blocks = [b for lang, b in blocks if lang in ("", "python", "py", "python3")] or [b for _, b in blocks]
    if not blocks:
        text = response or ""
        if "```" in text:  # an unclosed fence (generation cut off): take what follows it
            text = re.sub(r"^.*```[A-Za-z0-9_+-]*[^\n]*\n", "", text, flags=re.S)
        return text
    if entry_point:
        defining = [b for b in blocks if re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", b)]
        if defining:
            return defining[-1]
    return blocks[-1]


def detect_format(item: dict) -> str:
    fmt = item.get("format")
    if fmt:
        if fmt not in FORMATS:
            raise ValueError(f"unknown code format {fmt!r}; allowed: {', '.join(FORMATS)}")
        return fmt
    if "entry_point" in item and "test" in item:
        return "humaneval"
    if "test_list" in item:
        return "mbpp"
    if "tests" in item or "input_output" in item:
        return "lcb"
    if "test" in item and "solution" in str(item["test"]):
        return "kodcode"
    raise ValueError(
        "cannot tell the code format of item %r: give 'format' (one of %s) or HumanEval fields "
        "(prompt, response, test, entry_point)" % (item.get("id"), ", ".join(FORMATS))
    )


def _import_lines(prompt: str) -> str:
    return "\n".join(ln for ln in prompt.splitlines() if re.match(r"\s*(import|from)\s+\w", ln))


def build_job(item: dict) -> tuple[dict, dict, dict]:
    """(files, runner job, grading context) for one item."""
    fmt = detect_format(item)
    resp = item.get("response", "")
    if fmt == "humaneval":
        ep = item["entry_point"]
        code = extract_code(resp, ep)
        prompt = item.get("prompt", "")
        if re.search(rf"\bdef\s+{re.escape(ep)}\s*\(", code):
            program = _import_lines(prompt) + "\n" + code
        else:
            program = prompt + code
        program += "\n\n" + item["test"] + f"\n\ncheck({ep})\n"
        return {"prog.py": program}, {"mode": "script"}, {"fmt": fmt}
    if fmt == "mbpp":
        code = extract_code(resp, item.get("entry_point"))
        setup = item.get("test_setup_code") or ""
        imports = item.get("test_imports") or []
        imports = "\n".join(imports) if isinstance(imports, list) else str(imports)
        tests = "\n".join(item.get("test_list") or [])
        extra = item.get("test") or ""
        program = "\n".join([imports, setup, code, "", tests, extra]) + "\n"
        return {"prog.py": program}, {"mode": "script"}, {"fmt": fmt}
    if fmt == "kodcode":
        code = extract_code(resp)
        return ({"solution.py": code, "test_solution.py": item["test"]}, {"mode": "pytest"}, {"fmt": fmt})
    # lcb
    tests = item.get("tests")
    if tests is None:
        io = item["input_output"]
        io = json.loads(io) if isinstance(io, str) else io
        kind = "functional" if io.get("fn_name") else "stdin"
        tests = [{"input": i, "output": o, "testtype": kind} for i, o in zip(io["inputs"], io["outputs"])]
        item = {**item, "fn_name": io.get("fn_name") or item.get("fn_name")}
    if isinstance(tests, str):
        tests = json.loads(tests)
    if not tests:
        raise ValueError(f"item {item.get('id')!r} has no tests")
    code = extract_code(resp)
    if tests[0].get("testtype", "stdin") == "functional":
        fn = item.get("fn_name") or (item.get("metadata") or {}).get("func_name")
        if not fn:
            raise ValueError(f"functional LiveCodeBench item {item.get('id')!r} needs 'fn_name'")
        cases = [{"args": [json.loads(line) for line in t["input"].split("\n") if line.strip()]} for t in tests]
        expected = [json.loads(t["output"]) for t in tests]
        return (
            {"prog.py": code},
            {"mode": "call", "fn_name": fn, "cases": cases},
            {"fmt": fmt, "kind": "call", "expected": expected},
        )
    cases = [{"input": t["input"]} for t in tests]
    return (
        {"prog.py": code},
        {"mode": "stdio", "cases": cases},
        {"fmt": fmt, "kind": "stdio", "expected": [t["output"] for t in tests]},
    )


def outputs_match(got: str, expected: str) -> bool:
    """LiveCodeBench-style stdout comparison: stripped lines, then token-wise Decimal equality."""
    g = [ln.strip() for ln in got.strip().splitlines()]
    e = [ln.strip() for ln in expected.strip().splitlines()]
    if g == e:
        return True
    if len(g) != len(e):
        return False
    for gl, el in zip(g, e):
        if gl == el:
            continue
        gt, et = gl.split(), el.split()
        if len(gt) != len(et):
            return False
        try:
            if any(Decimal(a) != Decimal(b) for a, b in zip(gt, et)):
                return False
        except InvalidOperation:
            return False
    return True


def _normalize_value(x):
    if isinstance(x, tuple):
        return [_normalize_value(v) for v in x]
    if isinstance(x, list):
        return [_normalize_value(v) for v in x]
    return x


def classify(res: ExecResult, ctx: dict) -> dict:
    """Sandbox outcome -> ``{"correct", "status", "detail"}``."""
    if res.status != "completed":
        status = "timeout" if res.status == "timeout" else ("error" if res.status == "error" else "failed")
        return {"correct": False, "status": status, "detail": res.detail[:300]}
    rep = res.report or {}
    if ctx.get("kind") in ("stdio", "call"):
        if rep.get("error"):
            return {"correct": False, "status": "failed", "detail": rep["error"][:300]}
        cases, expected = rep.get("cases", []), ctx["expected"]
        for i, exp in enumerate(expected):
            if i >= len(cases):
                return {"correct": False, "status": "failed", "detail": f"case {i} did not run"}
            c = cases[i]
            if c.get("error"):
                st = "timeout" if c["error"] == "timeout" else "failed"
                return {"correct": False, "status": st, "detail": f"case {i}: {c['error']}"[:300]}
            ok = (
                outputs_match(c.get("stdout", ""), exp)
                if ctx["kind"] == "stdio"
                else _normalize_value(c.get("result")) == _normalize_value(exp)
            )
            if not ok:
                shown = c.get("stdout", "") if ctx["kind"] == "stdio" else c.get("result")
                return {
                    "correct": False,
                    "status": "failed",
                    "detail": f"case {i}: wrong answer (got {str(shown)[:80]!r})",
                }
        return {"correct": True, "status": "passed", "detail": f"{len(expected)} cases"}
    if rep.get("ok"):
        return {"correct": True, "status": "passed", "detail": ""}
    err = rep.get("error") or "failed"
    return {"correct": False, "status": "failed", "detail": str(err)[:300]}


def grade_code_many(items: Sequence[dict], sandbox: Sandbox, progress: bool = False) -> list[dict]:
    """Grade code items; a malformed item becomes ``status: error`` with the reason (the batch goes on)."""
    jobs, ctxs, errors = [], [], {}
    for i, item in enumerate(items):
        try:
            files, job, ctx = build_job(item)
        except (KeyError, ValueError, TypeError) as e:
            errors[i] = {"correct": False, "status": "error", "detail": f"bad item: {type(e).__name__}: {e}"[:300]}
            files, job, ctx = {"prog.py": ""}, {"mode": "script"}, {}
        jobs.append((files, job))
        ctxs.append(ctx)
    todo = [i for i in range(len(items)) if i not in errors]
    results = sandbox.run_many([jobs[i] for i in todo], progress=progress, desc="grading code")
    out: list[dict] = [errors.get(i) for i in range(len(items))]  # type: ignore[misc]
    for i, res in zip(todo, results):
        out[i] = classify(res, ctxs[i])
    return out
