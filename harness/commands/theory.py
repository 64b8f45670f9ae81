"""``harness theory [--out DIR] [--only ID ...]``: run the theory lab and write report.json / report.md / figures."""

from __future__ import annotations

import time

ORDER = 140


def run(args) -> int:
    from harness.theory.report import CLAIMS, run_all, write

    known = [fn.__name__ for fn in CLAIMS]
    bad = [c for c in (args.only or []) if c not in known]
    if bad:
        raise ValueError(f"unknown claim id(s) {bad}; known: {', '.join(known)}")
    t0 = time.perf_counter()
    report = run_all(args.only)
    write(report, args.out)
    for c in report["claims"]:
        print(f"{c['id']:<10} {c['verdict']:<24} {c['summary']}")
    print(f"wrote {args.out}/report.json and report.md in {time.perf_counter() - t0:.1f} s")
    return 0


def register(sub) -> None:
    p = sub.add_parser("theory", help="exact softmax-policy experiments testing the entropy-control theory claims")
    p.add_argument("--out", default="theory_report", help="output directory (default: theory_report)")
    p.add_argument("--only", nargs="+", metavar="ID", help="run only these claims (e.g. thm_iv1 prop_vi1)")
    p.set_defaults(func=run)
