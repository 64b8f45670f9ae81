"""Math answer grading: the boxed answer + math-verify, with a process pool and a hard per-item timeout.

What differs from raw math-verify and from the official Entropy-Mechanism grader (its ``prime_math`` rewrite)
is listed with an example each in docs/grading.md. In short: math-verify alone (the official grader also tries
Hendrycks and PRM800K string/sympy paths, which accept ``0,125`` for ``125``); the answer is *only* boxed content
(no box -> incorrect, never math-verify's unanchored "the answer is ..." extraction), by default the last box
(the official protocol; ``boxes="joined"`` joins the boxes of the final answer the way math-verify does); a gold
with several boxes is all of them; our own number normalisation (thousands separators, the decimal-comma rule);
``\\mathrm{e}``/``\\mathrm{i}``/``\\mathrm{d}`` kept as symbols (math-verify drops them); exact rationals compared
exactly (math-verify's 6-digit rounding calls ``1/2^99`` equal to ``1/2^98``); and every item runs in a worker
process that is killed when it overruns (math-verify's SIGALRM timeouts cannot interrupt C-level sympy work).
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
BOX_RULES = ("last", "joined")
DEFAULT_ITEM_TIMEOUT_S = 10.0
_PLAIN_INT = re.compile(r"^([+-]?)0*(\d+)$")
_INT_FLOAT = re.compile(r"^([+-]?\d+)\.0+$")

# --------------------------------------------------------------------------------------------------
# Boxes


@dataclass(frozen=True)
class _Box:
    start: int  # index of the command
    close: int  # index of the closing brace (old-style "\boxed 5": of the last character)
    content: str


def _parse_box(text: str, start: int) -> _Box | None:
    """The well-formed box whose command starts at ``start``, or None (unclosed, empty old-style, no brace)."""
    cmd = next(c for c in BOX_COMMANDS if text.startswith(c, start))
    i = start + len(cmd)
    if i < len(text) and text[i] == " ":  # "\boxed 5" (old-style)
        m = re.match(r" ([^\s$]+)", text[i:])
        return _Box(start, i + m.end() - 1, m.group(1)) if m else None
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{" and text[j - 1 : j] != "\\":
            depth += 1
        elif text[j] == "}" and text[j - 1 : j] != "\\":
            depth -= 1
            if depth == 0:
                return _Box(start, j, text[i + 1 : j].strip())
    return None


def _all_boxes(text: str) -> list[_Box]:
    """Every well-formed box (nested ones included), ordered by where its command starts."""
    if not text:
        return []
    starts = sorted({m.start() for cmd in BOX_COMMANDS for m in re.finditer(re.escape(cmd), text)})
    return [b for b in (_parse_box(text, s) for s in starts) if b is not None]


def extract_last_boxed(text: str) -> str | None:
    """Content of the last brace-matched ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed 5``); None if absent.

    An unclosed box does not count (it is not an answer the model committed to); "last" is the last box to
    start, so ``\\boxed{\\boxed{5}}`` gives ``5``."""
    boxes = _all_boxes(text)
    return boxes[-1].content if boxes else None


_JOIN_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")


def extract_final_boxes(text: str) -> str | None:
    """The final answer's boxes joined with ``", "`` (math-verify's rule, our code); None if there is no box.

    From the last box backwards, an earlier box belongs to the final answer when the text between it and the
    next one is shorter than 10 characters, or shorter than 70, holds ``and``/``or``/``,``/``;`` and the two
    contents differ (``\\boxed{1} and \\boxed{-2}`` -> ``1, -2``; ``\\boxed{3} ... long reasoning ...
    \\boxed{4}`` -> ``4``). Repeats of the same content next to each other count once. Unlike math-verify, an
    unclosed box is never an answer, and the parts are joined with ``", "`` (not ``","``), so two boxes ``1``
    and ``22`` stay a list and never read as the decimal comma ``1,22``."""
    boxes = _all_boxes(text)
    if not boxes:
        return None
    parts, cur = [boxes[-1].content], boxes[-1]
    for prev in reversed(boxes[:-1]):
        if prev.close >= cur.start:  # encloses the later box: the walk ends (math-verify: unclosed there)
            break
        between = text[prev.close + 1 : cur.start]
        close_enough = len(between) < 10 or (
            prev.content != parts[-1] and len(between) < 70 and _JOIN_SEPARATOR.search(between) is not None
        )
        if not close_enough:
            break
        if prev.content != parts[-1]:
            parts.append(prev.content)
        cur = prev
    return ", ".join(reversed(parts))


def extract_answer(text: str, boxes: str = "last") -> str | None:
    """The response's answer under a box rule: ``last`` (the official protocol) or ``joined``."""
    if boxes == "last":
        return extract_last_boxed(text)
    if boxes == "joined":
        return extract_final_boxes(text)
    raise ValueError(f"unknown box rule {boxes!r}; allowed: {', '.join(BOX_RULES)}")


def gold_answer(gold: str) -> str:
    """A gold string as one answer: all its top-level boxes joined with ``", "`` (repeats once), else itself.

    A gold is curated, so every box is part of the answer: ``\\boxed{1}\\boxed{2}`` -> ``1, 2``. Joining cannot
    reward a hedging model, since the response side still decides by its own box rule."""
    s = str(gold)
    boxes = _all_boxes(s) if any(c in s for c in BOX_COMMANDS) else []
    top = [b for b in boxes if not any(o.start < b.start and b.close <= o.close for o in boxes)]
    if not top:
        return s
    parts: list[str] = []
    for b in top:
        content = gold_answer(b.content)  # a box inside a box: its own boxes (\boxed{\boxed{5}} -> 5)
        if content not in parts:
            parts.append(content)
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------------
# Normalisation (docs/grading.md, "Numbers" and "Symbols")

# LaTeX thousands separators between a 1-3 digit lead (no leading zero) and 3-digit groups, also inside a longer
# answer: {,}  ,\!  \,  "\ "  \;  ~   e.g. 32,\! 349   10{,}000   1\,234   x = 12\;345
_LATEX_SEP = r"(?:\{,\}|,\\!\s*|\\[,; ]|~)"
_LATEX_THOUSANDS = re.compile(r"(?<![\d.^_])([1-9]\d{0,2}(?:" + _LATEX_SEP + r"\d{3})+)(?!\d|" + _LATEX_SEP + r"\d)")
# {,} between digits that is not a thousands separator is LaTeX's decimal comma: 3{,}14, 0{,}5
_BRACE_DECIMAL = re.compile(r"(?<![\d.])(\d+)\{,\}(\d+)(?![\d.]|\{,\})")
# whole answers: plain commas or plain spaces as thousands separators (English convention), lead without 0
_COMMA_THOUSANDS = re.compile(r"^([+-]?[1-9]\d{0,2}(?:,\d{3})+)(\.\d+)?$")
_SPACE_THOUSANDS = re.compile(r"^([+-]?[1-9]\d{0,2}(?: +\d{3})+)(\.\d+)?$")
# whole answers: one comma between digits, no space, not a thousands form -> decimal comma or a two-item list
_COMPACT_COMMA = re.compile(r"^([+-]?\d+),(\d+)$")

_SYMBOL = re.compile(
    r"\\(?:mathrm|mathit|textrm|operatorname)\s*\{\s*([eid])\s*\}"
    r"|\\(?:mathrm|mathit|textrm|operatorname)\s+([eid])(?![A-Za-z])"
    r"|\{\s*\\rm\s+([eid])\s*\}"
)


def _keep_symbols(s: str) -> str:
    """``\\mathrm{e}``, ``\\mathrm{i}``, ``\\mathrm{d}`` (also ``\\mathit``, ``\\textrm``, ``\\operatorname``,
    ``{\\rm e}``) as the bare letters e, i, d, which math-verify reads as Euler's e, the symbol i and d.

    math-verify turns ``\\mathrm`` into ``\\text`` and then drops a trailing text as a unit, so ``2\\mathrm{e}``
    parses as ``2``. Braces guard a letter next to another letter (``\\pi{e}``, not the command ``\\pie``) and a
    final ``d`` after a number (math-verify drops a trailing ``d`` as the unit "day"); a ``d`` followed by a
    letter or command is a differential and stays ``d`` (``\\mathrm{d}x`` -> ``dx``, as math-verify reads it)."""
    out: list[str] = []
    pos = 0
    for m in _SYMBOL.finditer(s):
        out.append(s[pos : m.start()])
        letter = m.group(1) or m.group(2) or m.group(3)
        prev = "".join(out)[-1:]
        rest = s[m.end() :]
        nxt = rest.lstrip()[:1]
        if letter == "d" and (nxt.isalpha() or nxt == "\\"):
            rep = (" " if prev.isalpha() else "") + "d"
        elif prev.isalpha() or rest[:1].isalpha():
            rep = "{" + letter + "}"
        elif letter == "d" and not rest.strip() and (prev.isdigit() or prev in "} "):
            rep = "{d}"
        else:
            rep = letter
        out.append(rep)
        pos = m.end()
    out.append(s[pos:])
    return "".join(out)


def normalize_answer(ans: str) -> str:
    """Light, documented normalisation applied to gold and prediction before math-verify (docs/grading.md).

    Strips ``$``; several boxes -> all joined (``gold_answer``); ``\\mathrm{e}``-style symbols kept as letters;
    thousands separators ``10,000``, ``10{,}000``, ``32,\\! 349``, ``1\\,000``, ``1 000`` removed (a first group
    of ``0`` is never one: ``0,125`` is not ``125``); ``3{,}14`` -> ``3.14``; AIME zero padding (``025`` ->
    ``25``) and integral floats (``27.0`` -> ``27``, AMC23 stores floats). A compact ``1,22`` is left as it is:
    ``grade_math`` reads it both as ``1.22`` and as the list ``1, 22`` (``answer_readings``)."""
    s = str(ans).strip()
    if s.startswith("$") and s.endswith("$") and len(s) >= 2:
        s = s.strip("$").strip()
    s = gold_answer(s)
    s = _keep_symbols(s)
    s = _LATEX_THOUSANDS.sub(lambda m: re.sub(_LATEX_SEP, "", m.group(1)), s)
    s = _BRACE_DECIMAL.sub(r"\1.\2", s)
    s = s.replace("{,}", ",")
    s = re.sub(r"\\!\s*", "", s)
    s = s.rstrip(".").strip()
    m = _COMMA_THOUSANDS.match(s) or _SPACE_THOUSANDS.match(s)
    if m:
        s = re.sub(r"[, ]", "", m.group(1)) + (m.group(2) or "")
    m = _INT_FLOAT.match(s)
    if m:
        s = m.group(1)
    m = _PLAIN_INT.match(s)
    if m:
        s = (m.group(1) if m.group(1) == "-" else "") + m.group(2)
    return s


def answer_readings(norm: str) -> list[str]:
    """The readings of a normalised answer: a compact ``a,b`` (``1,22``, ``0,111``) is the decimal ``a.b`` or the
    two-item list ``a, b``; anything else reads one way.

    A number never equals a two-item list, so against one other answer at most one reading can match; readings
    that are both numbers (``1,234`` as 1234 or as 1.234) are never offered: that would accept two numbers."""
    m = _COMPACT_COMMA.match(norm)
    return [f"{m.group(1)}.{m.group(2)}", f"{m.group(1)}, {m.group(2)}"] if m else [norm]


# --------------------------------------------------------------------------------------------------
# Grading


@dataclass
class MathVerdict:
    correct: bool
    pred: str | None
    reason: str  # correct | wrong | no_box | parse_error | timeout | error

    def as_dict(self) -> dict:
        return {"correct": self.correct, "pred": self.pred, "reason": self.reason}


def grade_math(response: str, gold: str, *, parse_timeout: int = 5, boxes: str = "last") -> MathVerdict:
    """Grade one response in the calling thread (must be a main thread: math-verify uses SIGALRM).

    ``boxes``: ``last`` (default, the official protocol) or ``joined`` (the final answer's boxes, as math-verify
    joins them). The gold is always every box it holds. A missing gold (None, a float NaN from an empty table
    cell, an empty string) grades nothing correct: ``bad_gold``."""
    if gold is None or (isinstance(gold, float) and gold != gold) or not str(gold).strip():
        return MathVerdict(False, extract_answer(response or "", boxes), "bad_gold")
    pred = extract_answer(response or "", boxes)
    if pred is None:
        return MathVerdict(False, None, "no_box")
    if not pred.strip():
        return MathVerdict(False, pred, "no_box")
    gold_n, pred_n = normalize_answer(gold), normalize_answer(pred)
    if gold_n == pred_n:
        return MathVerdict(True, pred, "correct")
    golds, preds = answer_readings(gold_n), answer_readings(pred_n)
    try:
        if len(golds) > 1 and len(preds) > 1:  # both compact: right only if right under both readings
            outcomes = [_compare(g, p, parse_timeout) for g, p in zip(golds, preds)]
            ok = all(o == "correct" for o in outcomes)
        else:  # at most one reading can match (a number never equals a two-item list)
            outcomes = [_compare(g, p, parse_timeout) for g in golds for p in preds]
            ok = "correct" in outcomes
    except BaseException as e:  # math-verify's TimeoutException subclasses BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return MathVerdict(False, pred, "timeout" if "imeout" in type(e).__name__ else "error")
    if ok:
        return MathVerdict(True, pred, "correct")
    return MathVerdict(False, pred, "parse_error" if all(o == "parse_error" for o in outcomes) else "wrong")


def _compare(gold_n: str, pred_n: str, parse_timeout: int) -> str:
    """``correct`` / ``wrong`` / ``parse_error`` for two normalised single readings (math-verify + exact check)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    if gold_n == pred_n:
        return "correct"
    g = parse("\\boxed{" + gold_n + "}", [LatexExtractionConfig()], parsing_timeout=parse_timeout)
    if not g:  # gold that is not LaTeX (e.g. "x^2 + 1" plain text)
        g = parse(gold_n, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=parse_timeout)
    p = parse(
        "\\boxed{" + pred_n + "}", [LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=parse_timeout
    )
    if not g or not p:
        return "parse_error"
    exact = _exact_numbers_equal(g[0], p[0])
    ok = exact if exact is not None else verify(g, p, timeout_seconds=parse_timeout)
    return "correct" if ok else "wrong"


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
        idx, response, gold, boxes = msg
        try:
            v = grade_math(response, gold, boxes=boxes).as_dict()
        except BaseException as e:  # noqa: BLE001 - a grading crash is an incorrect answer, not a crash
            v = {"correct": False, "pred": None, "reason": f"error: {type(e).__name__}"}
        conn.send((idx, v))


class MathGraderPool:
    """Grade many (response, gold) pairs in ``workers`` processes; each item gets ``timeout_s`` wall time.

    Use as a context manager. ``grade(pairs)`` returns verdict dicts in input order. ``boxes`` is the response
    box rule of ``grade_math`` (``last``, the default, or ``joined``)."""

    DEPTH = 2

    def __init__(self, workers: int | None = None, timeout_s: float = DEFAULT_ITEM_TIMEOUT_S, boxes: str = "last"):
        if boxes not in BOX_RULES:
            raise ValueError(f"unknown box rule {boxes!r}; allowed: {', '.join(BOX_RULES)}")
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.timeout_s = float(timeout_s)
        self.boxes = boxes
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
                    self._procs[slot][1].send((i, pairs[i][0], pairs[i][1], self.boxes))
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
                    pred = extract_answer(pairs[i][0] or "", self.boxes)
                    finish(i, {"correct": False, "pred": pred, "reason": "timeout"})
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
    boxes: str = "last",
) -> list[dict]:
    """Convenience wrapper: grade pairs in a fresh pool (``boxes``: the response box rule)."""
    pairs = list(pairs)
    if not pairs:
        return []
    n = min(workers or os.cpu_count() or 1, len(pairs))
    with MathGraderPool(workers=n, timeout_s=timeout_s, boxes=boxes) as pool:
        return pool.grade(pairs, progress=progress)


def compare_box_rules(
    rows: list[dict], *, workers: int | None = None, timeout_s: float = DEFAULT_ITEM_TIMEOUT_S
) -> dict:
    """What the official last-box rule costs: each graded row also gets ``correct_joined`` (its verdict under the
    joined-boxes rule), in place, and the counts come back.

    ``rows`` hold ``response``, ``answer`` and ``correct`` (the last-box verdict). Only rows whose joined answer
    differs from their last box are graded again (in the pool); the others keep their verdict. Returns
    ``{"default": "last", "rows", "changed", "gained", "lost"}``: gained = wrong under the last box, right
    joined; lost = the reverse."""
    again = [
        i
        for i, r in enumerate(rows)
        if extract_final_boxes(r.get("response") or "") != extract_last_boxed(r.get("response") or "")
    ]
    verdicts = grade_math_many(
        [(rows[i].get("response") or "", rows[i]["answer"]) for i in again],
        workers=workers,
        timeout_s=timeout_s,
        boxes="joined",
    )
    for r in rows:
        r["correct_joined"] = bool(r["correct"])
    for i, v in zip(again, verdicts):
        rows[i]["correct_joined"] = bool(v["correct"])
    gained = sum(1 for r in rows if r["correct_joined"] and not r["correct"])
    lost = sum(1 for r in rows if r["correct"] and not r["correct_joined"])
    return {"default": "last", "rows": len(rows), "changed": gained + lost, "gained": gained, "lost": lost}


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
