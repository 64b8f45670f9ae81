"""Math answer grading: last ``\\boxed{}`` + math-verify, with a process pool and a hard per-item timeout.

What differs from the official Entropy-Mechanism grader (verl ``prime_math`` rewrite): we use math-verify
alone (no PRM800K string/sympy fallbacks, whose ``isclose(rel_tol=1e-4)`` accepts ``9999`` for ``10,000``),
the answer is *only* the content of the last brace-matched ``\\boxed{}``/``\\fbox{}`` (no box -> incorrect,
never math-verify's unanchored "the answer is ..." extraction, which grades restated questions as correct),
exact rationals are compared exactly (math-verify's 6-digit rounding calls ``1/2^99`` equal to ``1/2^98``),
and every item runs in a worker process that is killed when it overruns, so a tower of exponents cannot hang
an evaluation (math-verify's own timeouts are SIGALRM-based and cannot interrupt C-level sympy work).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait

from tqdm.auto import tqdm

BOX_COMMANDS = ("\\boxed", "\\fbox")
DEFAULT_ITEM_TIMEOUT_S = 10.0
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_PLAIN_INT = re.compile(r"^([+-]?)0*(\d+)$")
_INT_FLOAT = re.compile(r"^([+-]?\d+)\.0+$")


def extract_last_boxed(text: str) -> str | None:
    """Content of the last brace-matched ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed 5``); None if absent.

    An unclosed box does not count (it is not an answer the model committed to)."""
    if not text:
        return None
    # scan candidates from the last one backwards: the last *well-formed* box wins
    starts = sorted({m.start() for cmd in BOX_COMMANDS for m in re.finditer(re.escape(cmd), text)}, reverse=True)
    for start in starts:
        cmd = next(c for c in BOX_COMMANDS if text.startswith(c, start))
        i = start + len(cmd)
        if i < len(text) and text[i] == " ":  # "\boxed 5" (old-style)
            m = re.match(r" ([^\s$]+)", text[i:])
            if m:
                return m.group(1)
            continue
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != "{":
            continue
        depth, j = 0, i
        while j < len(text):
            if text[j] == "{" and text[j - 1 : j] != "\\":
                depth += 1
            elif text[j] == "}" and text[j - 1 : j] != "\\":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j].strip()
            j += 1
    return None


def normalize_answer(ans: str) -> str:
    """Light, documented normalisation applied to gold and prediction before math-verify.

    Strips ``$``, ``\\,``/``{,}`` thousands separators, plain ``10,000`` separators, AIME zero padding
    (``025`` -> ``25``) and integral floats (``27.0`` -> ``27``, AMC23 stores floats)."""
    s = str(ans).strip()
    if s.startswith("$") and s.endswith("$") and len(s) >= 2:
        s = s.strip("$").strip()
    boxed = extract_last_boxed(s) if any(c in s for c in BOX_COMMANDS) else None
    if boxed is not None:
        s = boxed
    s = s.replace("{,}", "").replace("\\!", "")
    if re.fullmatch(r"[+-]?\d{1,3}(\\,\d{3})+(\.\d+)?", s):
        s = s.replace("\\,", "")
    s = s.rstrip(".").strip()
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    m = _INT_FLOAT.match(s)
    if m:
        s = m.group(1)
    m = _PLAIN_INT.match(s)
    if m:
        s = (m.group(1) if m.group(1) == "-" else "") + m.group(2)
    return s


@dataclass
class MathVerdict:
    correct: bool
    pred: str | None
    reason: str  # correct | wrong | no_box | parse_error | timeout | error

    def as_dict(self) -> dict:
        return {"correct": self.correct, "pred": self.pred, "reason": self.reason}


def grade_math(response: str, gold: str, *, parse_timeout: int = 5) -> MathVerdict:
    """Grade one response in the calling thread (must be a main thread: math-verify uses SIGALRM)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    pred = extract_last_boxed(response or "")
    if pred is None:
        return MathVerdict(False, None, "no_box")
    if not pred.strip():
        return MathVerdict(False, pred, "no_box")
    gold_n, pred_n = normalize_answer(gold), normalize_answer(pred)
    if gold_n == pred_n:
        return MathVerdict(True, pred, "correct")
    try:
        g = parse("\\boxed{" + gold_n + "}", [LatexExtractionConfig()], parsing_timeout=parse_timeout)
        if not g:  # gold that is not LaTeX (e.g. "x^2 + 1" plain text)
            g = parse(gold_n, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=parse_timeout)
        p = parse(
            "\\boxed{" + pred_n + "}", [LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=parse_timeout
        )
        if not g or not p:
            return MathVerdict(False, pred, "parse_error")
        exact = _exact_numbers_equal(g[0], p[0])
        ok = exact if exact is not None else verify(g, p, timeout_seconds=parse_timeout)
    except BaseException as e:  # math-verify's TimeoutException subclasses BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return MathVerdict(False, pred, "timeout" if "imeout" in type(e).__name__ else "error")
    return MathVerdict(bool(ok), pred, "correct" if ok else "wrong")


def _exact_numbers_equal(gold, pred) -> bool | None:
    """Equality of two exact numeric expressions (no symbols, no decimals) to 50 significant digits.

    math-verify compares numbers after rounding to 6 digits, so ``1/2^99`` equals ``1/2^98`` and ``1/2004!``
    equals ``1/2006!`` there. Returns None (let math-verify decide) for anything else, including decimals,
    whose tolerant comparison is kept."""
    try:
        import sympy

        exprs = (gold, pred)
        if not all(isinstance(e, sympy.Expr) and not e.free_symbols and not e.atoms(sympy.Float) for e in exprs):
            return None
        gv, dv = sympy.N(gold, 60), sympy.N(gold - pred, 60)
        if dv == 0:
            return True
        if not (gv.is_real and dv.is_real and gv.is_finite and dv.is_finite):
            return None  # complex, infinite, undefined: math-verify's business
        return bool(gv != 0 and abs(dv) <= abs(gv) * sympy.Float("1e-50", 60))
    except Exception:  # noqa: BLE001 - any trouble: fall back to math-verify
        return None


# --------------------------------------------------------------------------------------------------
# Process pool with a hard per-item timeout (a worker that overruns is killed and replaced).


def _worker_main(conn) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # own session: Ctrl-C goes to the parent only, and (Linux autogroup) the worker is scheduled as its own
        os.setsid()  # group like each sandboxed program, instead of sharing one CPU share with the parent
    except OSError:
        pass
    try:
        import math_verify  # noqa: F401  (warm import once per worker)
    except Exception:
        pass
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        idx, response, gold = msg
        try:
            v = grade_math(response, gold).as_dict()
        except BaseException as e:  # noqa: BLE001 - a grading crash is an incorrect answer, not a crash
            v = {"correct": False, "pred": None, "reason": f"error: {type(e).__name__}"}
        conn.send((idx, v))


class MathGraderPool:
    """Grade many (response, gold) pairs in ``workers`` processes; each item gets ``timeout_s`` wall time.

    Use as a context manager. ``grade(pairs)`` returns verdict dicts in input order."""

    DEPTH = 2

    def __init__(self, workers: int | None = None, timeout_s: float = DEFAULT_ITEM_TIMEOUT_S):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.timeout_s = float(timeout_s)
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        self._ctx = mp.get_context(method)
        self._procs: list = []

    def _spawn(self):
        parent, child = self._ctx.Pipe()
        p = self._ctx.Process(target=_worker_main, args=(child,), daemon=True)
        p.start()
        child.close()
        return [p, parent]

    def __enter__(self):
        if self._ctx.get_start_method() == "fork":  # import + build the parsers once; workers inherit them
            grade_math("\\boxed{\\frac{1}{2}}", "0.5")
        self._procs = [self._spawn() for _ in range(self.workers)]
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for _proc, conn in self._procs:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p, conn in self._procs:
            p.join(timeout=1)
            if p.is_alive():
                p.kill()
                p.join()
            conn.close()
        self._procs = []

    def grade(self, pairs: Sequence[tuple[str, str]], progress: bool = False) -> list[dict]:
        if not self._procs:
            with self:
                return self.grade(pairs, progress)
        from collections import deque

        results: list[dict | None] = [None] * len(pairs)
        todo = list(range(len(pairs)))[::-1]
        n = len(self._procs)
        # up to DEPTH items queued per worker, so a worker never idles while the dispatcher waits for a CPU;
        # only the head item of a worker is running, and its deadline starts when the previous one returned
        inflight = [deque() for _ in range(n)]
        deadline = [0.0] * n
        bar = tqdm(total=len(pairs), desc="grading math", disable=not progress, leave=False)

        def finish(i: int, verdict: dict) -> None:
            results[i] = verdict
            bar.update(1)

        while todo or any(inflight):
            now = time.monotonic()
            for slot in range(n):
                while len(inflight[slot]) < self.DEPTH and todo:
                    i = todo.pop()
                    self._procs[slot][1].send((i, pairs[i][0], pairs[i][1]))
                    if not inflight[slot]:
                        deadline[slot] = now + self.timeout_s
                    inflight[slot].append(i)
            conns = {self._procs[s][1]: s for s in range(n) if inflight[s]}
            next_deadline = min(deadline[s] for s in conns.values())
            for c in mp_wait(list(conns), timeout=max(0.0, next_deadline - time.monotonic())):
                slot = conns[c]
                while inflight[slot] and c.poll():
                    try:
                        idx, verdict = c.recv()
                    except (EOFError, OSError):  # worker died (e.g. the OOM killer)
                        finish(
                            inflight[slot].popleft(), {"correct": False, "pred": None, "reason": "error: worker died"}
                        )
                        todo.extend(reversed(inflight[slot]))
                        inflight[slot].clear()
                        self._replace(slot)
                        break
                    inflight[slot].popleft()
                    finish(idx, verdict)
                    deadline[slot] = time.monotonic() + self.timeout_s
            now = time.monotonic()
            for slot in range(n):
                if inflight[slot] and now >= deadline[slot]:
                    i = inflight[slot].popleft()
                    todo.extend(reversed(inflight[slot]))  # queued behind it, never started
                    inflight[slot].clear()
                    self._replace(slot)
                    finish(i, {"correct": False, "pred": extract_last_boxed(pairs[i][0] or ""), "reason": "timeout"})
        bar.close()
        return results  # type: ignore[return-value]

    def _replace(self, slot: int) -> None:
        p, conn = self._procs[slot]
        p.kill()
        p.join()
        conn.close()
        self._procs[slot] = self._spawn()


def grade_math_many(
    pairs: Iterable[tuple[str, str]],
    workers: int | None = None,
    timeout_s: float = DEFAULT_ITEM_TIMEOUT_S,
    progress: bool = False,
) -> list[dict]:
    """Convenience wrapper: grade pairs in a fresh pool."""
    pairs = list(pairs)
    if not pairs:
        return []
    with MathGraderPool(workers=min(workers or os.cpu_count() or 1, len(pairs)), timeout_s=timeout_s) as pool:
        return pool.grade(pairs, progress=progress)


def merge_equivalent_answers(
    per_problem: list[dict], workers: int | None = None, timeout_s: float = DEFAULT_ITEM_TIMEOUT_S
) -> None:
    """Make ``answers`` keys equal for mathematically equivalent answers, in place (for maj@k).

    Each entry has ``answers`` (normalised answer strings or None) and ``correct`` (bools). Correct answers are
    all equivalent to the gold answer, so they become one class. Distinct wrong answers are compared pairwise
    with math-verify (in the pool) only where merging could change the vote: when the wrong samples together
    are at least as many as the correct ones."""
    pairs, where = [], []
    for pi, p in enumerate(per_problem):
        answers, correct = p["answers"], p["correct"]
        keys = ["<correct>" if ok and a is not None else a for a, ok in zip(answers, correct)]
        p["answers"] = keys
        wrong = sorted({a for a, ok in zip(keys, correct) if a is not None and not ok})
        n_wrong = sum(1 for a, ok in zip(keys, correct) if a is not None and not ok)
        if len(wrong) < 2 or n_wrong < sum(correct):
            continue
        for i in range(len(wrong)):
            for j in range(i + 1, len(wrong)):
                pairs.append(("\\boxed{" + wrong[i] + "}", wrong[j]))
                where.append((pi, wrong[i], wrong[j]))
    if not pairs:
        return
    verdicts = grade_math_many(pairs, workers=workers, timeout_s=timeout_s)
    parents: dict[tuple, tuple] = {}

    def find(x):
        while parents.get(x, x) != x:
            x = parents[x]
        return x

    for (pi, a, b), v in zip(where, verdicts):
        if v["correct"]:
            ra, rb = find((pi, a)), find((pi, b))
            if ra != rb:
                parents[max(ra, rb)] = min(ra, rb)
    for pi, p in enumerate(per_problem):
        p["answers"] = [a if a in (None, "<correct>") else find((pi, a))[1] for a in p["answers"]]
