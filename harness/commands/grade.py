"""``harness grade --input FILE --output FILE``: re-grade saved generations (math or code JSONL)."""

from __future__ import annotations

from pathlib import Path

from harness.commands._common import make_sandbox, positive

ORDER = 80
MATH_FIELDS = ("id", "response", "answer")
TEST_FIELDS = ("test", "test_list", "tests", "input_output")
CODE_HINT = (
    "HumanEval-shaped code lines need id, prompt, response, test, entry_point (MBPP: test_list; "
    "LiveCodeBench: tests; KodCode: format=kodcode + test)"
)


def register(sub) -> None:
    g = sub.add_parser(
        "grade",
        help="re-grade saved generations (math or code JSONL)",
        description="Re-grade a JSONL file. Math line: {id, response, answer}. "
        + CODE_HINT
        + ". Writes each line plus correct (and status/detail for code).",
    )
    g.add_argument("--input", required=True)
    g.add_argument("--output", required=True)
    g.add_argument("--kind", choices=["auto", "math", "code"], default="auto")
    g.add_argument("--workers", type=int)
    g.add_argument(
        "--boxes",
        choices=["last", "joined"],
        default="last",
        help="math responses: the last \\boxed{} decides (official, default) or every box of the final answer joined "
        "(math-verify's rule; docs/grading.md)",
    )
    g.add_argument("--timeout", type=float, default=10.0, help="math: seconds per item; code: wall seconds")
    g.add_argument("--sandbox-python")
    g.set_defaults(func=run)


def _kind_of(row: dict) -> str:
    if any(k in row for k in ("test", "test_list", "tests", "entry_point", "input_output")):
        return "code"
    return "math"


def run(args) -> int:
    from harness.io import check_output_file, write_jsonl

    src, dst = Path(args.input), Path(args.output)
    if not src.exists():
        raise FileNotFoundError(f"input file {src} does not exist")
    if dst.resolve() == src.resolve():
        raise ValueError("--output must differ from --input (the input is never overwritten)")
    check_output_file(dst, "--output")
    if not args.timeout > 0:  # a zero budget makes verdicts depend on machine load (differ between reruns)
        raise ValueError(f"--timeout {args.timeout}: must be > 0 seconds")
    positive(args, ("workers",))
    rows, kinds = read_rows(src, args.kind)
    verdicts = _grade(rows, kinds, args)
    out_rows = []
    for row, kind, v in zip(rows, kinds, verdicts):
        extra = {"correct": v["correct"]}
        if kind == "code":
            extra.update(status=v["status"], detail=v["detail"])
        else:
            extra.update(pred=v.get("pred"), reason=v.get("reason"))
        out_rows.append({**row, **extra})
    dst.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(dst, out_rows)
    n_ok = sum(r["correct"] for r in out_rows)
    print(f"graded {len(out_rows)} lines: {n_ok} correct ({n_ok / max(1, len(out_rows)):.1%}) -> {dst}")
    return 0


def read_rows(src: Path, kind: str) -> tuple[list[dict], list[str]]:
    """The rows of ``src`` and each one's kind (math or code; ``kind`` auto: by its fields); a line without the
    fields its kind needs is an error naming it."""
    from harness.io import jsonl_lines

    rows, kinds = [], []
    for ln, row in jsonl_lines(src):
        if not isinstance(row, dict):
            raise ValueError(f"{src}:{ln}: expected a JSON object")
        row_kind = kind if kind != "auto" else _kind_of(row)
        need = MATH_FIELDS if row_kind == "math" else ("id", "response")
        missing = [f for f in need if f not in row]
        if missing:
            what = "math lines need id, response, answer" if row_kind == "math" else CODE_HINT
            raise ValueError(f"{src}:{ln}: missing field(s) {', '.join(missing)} ({what})")
        if row_kind == "code" and not any(row.get(k) for k in TEST_FIELDS):
            raise ValueError(
                f"{src}:{ln}: a code line with no tests (one of {', '.join(TEST_FIELDS)} must be "
                f"non-empty); without tests no verdict means anything"
            )
        rows.append(row)
        kinds.append(row_kind)
    return rows, kinds


def _grade(rows: list[dict], kinds: list[str], args) -> list[dict]:
    """Each row's verdict: the math rows graded together, then the code rows in a sandbox."""
    from harness.evals.evaluate import grade_items

    verdicts: list = [None] * len(rows)
    for kind in ("math", "code"):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        if not idx:
            continue
        sandbox = make_sandbox(args.sandbox_python, args.workers, args.timeout) if kind == "code" else None
        try:
            res = grade_items(
                kind,
                [rows[i] for i in idx],
                workers=args.workers,
                sandbox=sandbox,
                math_timeout_s=args.timeout,
                progress=True,
                boxes=args.boxes,
            )
        finally:
            if sandbox is not None:
                sandbox.close()
        for i, v in zip(idx, res):
            verdicts[i] = v
    return verdicts
