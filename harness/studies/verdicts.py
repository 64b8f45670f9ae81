"""Verdicts of the mechanism study, decided by code from intervals (docs/mechanism_prereg.md states the rules).

A claim (e.g. "GRPO's entropy collapses" at one size) is decided by one or more tests. Each test compares an
estimate with a fixed value (``null``) on the side the claim predicts (``side``: ``above`` or ``below``), with its
95% interval and the two-sided p of a Student-t test over runs (seeds). p-values are Holm-adjusted over the
**family** the test belongs to (every test of that family in the analysis; the family size is stored). A test
then ``pass``es (adjusted p < ALPHA, estimate on the claim's side), ``fail``s (adjusted p < ALPHA, estimate on the
other side) or stays ``unresolved``. Roles and the verdict rule:

* ``precondition`` (e.g. "there is a gain to split"): any not passed -> ``inconclusive``;
* ``qualitative`` (the direction of the claim): fail -> ``does not``; unresolved -> ``inconclusive``;
* ``quantitative`` (the paper's size of the effect, with the registered tolerance): all pass -> ``reproduces``,
  otherwise ``partly`` (the direction holds, the size is rejected or not established);
* fewer than MIN_RUNS runs behind any test -> ``inconclusive``.

``decide(claims)`` returns the ``verdicts`` block of mechanism.json; ``verdict_markdown`` renders it, and
``python -m harness.studies.verdicts JSON... --out MD [--docs FILE]`` writes the table (and replaces
the part of FILE between the markers VERDICTS_BEGIN / VERDICTS_END with it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.results import stats

ALPHA = 0.05
MIN_RUNS = 3
ROLES = ("precondition", "qualitative", "quantitative")
VERDICTS = ("reproduces", "partly", "does not", "inconclusive")
BEGIN, END = (
    "<!-- VERDICTS_BEGIN (generated: python -m harness.studies.verdicts) -->",
    "<!-- VERDICTS_END -->",
)


@dataclass
class Check:
    name: str  # what is tested, e.g. "end/start entropy < 0.1"
    role: str  # precondition | qualitative | quantitative
    side: str  # above | below: where the claim puts the estimate relative to null
    estimate: float
    lo: float
    hi: float
    n: int
    p: float
    null: float
    unit: str = ""  # "ratio" (log-scale interval), "r" (Fisher z), "" (plain t interval)
    p_holm: float = math.nan
    family_size: int = 0
    outcome: str = "unresolved"

    @classmethod
    def of(cls, name: str, role: str, side: str, b: stats.Bounds, unit: str = "") -> Check:
        if role not in ROLES or side not in ("above", "below"):
            raise ValueError(f"test {name!r}: role must be one of {ROLES} and side above|below")
        return cls(name, role, side, b.estimate, b.lo, b.hi, b.n, b.p, b.null, unit)

    @classmethod
    def mean(cls, name: str, role: str, side: str, values, null: float) -> Check:
        """A plain t interval and t test of the mean of ``values`` against ``null``."""
        iv = stats.mean_ci(values)
        _, p, _ = stats.t_test(values, null)
        return cls(name, role, side, iv.mean, iv.lo, iv.hi, iv.n, p, null)


@dataclass
class Claim:
    claim: str  # short id: collapse, early_drop, ...
    cell: str  # the size (or method/size, optimizer/lr) it is decided for
    family: str  # Holm family of its tests
    statement: str  # the paper's claim in words
    tests: list[Check] = field(default_factory=list)
    headline: str = ""  # the main number, for the table
    verdict: str = "inconclusive"
    why: str = ""


def _outcome(t: Check, alpha: float) -> str:
    if not math.isfinite(t.p_holm) or t.p_holm >= alpha or not math.isfinite(t.estimate):
        return "unresolved"
    on_side = t.estimate > t.null if t.side == "above" else t.estimate < t.null
    return "pass" if on_side else "fail"


def verdict_of(tests: list[Check]) -> tuple[str, str]:
    """(verdict, reason) of one claim from its tests' outcomes (see the module docstring)."""
    few = [t for t in tests if t.n < MIN_RUNS]
    if few:
        return "inconclusive", f"{few[0].name}: n = {few[0].n} < {MIN_RUNS}"
    for t in tests:
        if t.role == "precondition" and t.outcome != "pass":
            return "inconclusive", f"precondition not established: {t.name} ({t.outcome})"
    qual = [t for t in tests if t.role == "qualitative"]
    for t in qual:
        if t.outcome == "fail":
            return "does not", f"{t.name}: rejected"
    for t in qual:
        if t.outcome != "pass":
            return "inconclusive", f"{t.name}: interval includes {t.null:g} after Holm"
    quant = [t for t in tests if t.role == "quantitative"]
    missed = [t for t in quant if t.outcome != "pass"]
    if missed:
        return "partly", "; ".join(
            f"{t.name}: {'rejected' if t.outcome == 'fail' else 'not established'}" for t in missed
        )
    return "reproduces", "every test passed after Holm"


def decide(claims: list[Claim], alpha: float = ALPHA) -> dict:
    """Holm within each family, outcomes, verdicts; returns the JSON-able ``verdicts`` block."""
    families: dict[str, list[Check]] = {}
    for c in claims:
        families.setdefault(c.family, []).extend(c.tests)
    sizes = {}
    for fam, tests in families.items():
        adjusted = stats.holm([t.p for t in tests])
        size = sum(math.isfinite(t.p) for t in tests)
        sizes[fam] = size
        for t, p in zip(tests, adjusted):
            t.p_holm, t.family_size = p, size
            t.outcome = _outcome(t, alpha)
    for c in claims:
        c.verdict, c.why = verdict_of(c.tests)
    return _clean(
        {
            "alpha": alpha,
            "min_runs": MIN_RUNS,
            "correction": "holm",
            "families": {f: {"size": s} for f, s in sizes.items()},
            "claims": [asdict(c) for c in claims],
        }
    )


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ---------------------------------------------------------------------------------------------- rendering
def _num(v, unit: str = "") -> str:
    if v is None:
        return "—"
    if unit == "points":
        return f"{100 * v:+.1f}"
    if unit == "r":
        return f"{v:+.4f}"
    return f"{v:.3g}"


def _test_text(t: dict) -> str:
    unit = t.get("unit") if t.get("unit") in ("points", "r") else ""
    mark = {"pass": "✔", "fail": "✘", "unresolved": "?"}.get(t["outcome"], "?")
    rel = ">" if t["side"] == "above" else "<"
    text = (
        f"{mark} {t['name']}: {_num(t['estimate'], unit)} [{_num(t['lo'], unit)}, {_num(t['hi'], unit)}] "
        f"{rel} {_num(t['null'], unit)}; n={t['n']}, p_Holm={_p(t['p_holm'])} (m={t['family_size']})"
    )
    return f"**{text}**" if t["outcome"] == "pass" else text


def _cell(text: str) -> str:
    """A table cell's text: its pipes escaped (|error| would end the cell)."""
    return text.replace("|", "\\|")


def _p(p) -> str:
    if p is None:
        return "—"
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def verdict_markdown(blocks: list[tuple[str, dict]]) -> str:
    """The verdict table(s), one per (title, verdicts block); bold = passed after Holm (✔ pass, ✘ rejected,
    ? unresolved); intervals are 95% (ratios on the log scale, correlations on Fisher's z)."""
    out = []
    for title, v in blocks:
        fams = ", ".join(f"{f} m={d['size']}" for f, d in v["families"].items())
        out += [
            f"**{title}** (α = {v['alpha']} per family after Holm; family sizes: {fams}; "
            f"fewer than {v['min_runs']} runs: inconclusive)",
            "",
            "| claim | cell | verdict | headline | tests (estimate [95% CI] vs null; n runs; Holm p, family size) |",
            "|---|---|---|---|---|",
        ]
        for c in v["claims"]:
            tests = "<br>".join(_cell(_test_text(t)) for t in c["tests"])
            out.append(
                f"| {_cell(c['statement'])} | {c['cell']} | **{c['verdict']}** | {_cell(c['headline'])} | {tests} |"
            )
        out.append("")
    return "\n".join(out)


def render_into(doc: Path, table: str) -> None:
    """Replace the text between BEGIN and END in ``doc`` with ``table`` (both markers must be present)."""
    text = doc.read_text(encoding="utf-8")
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"{doc}: needs the markers {BEGIN!r} and {END!r} (in this order) around the verdict table")
    doc.write_text(text[: i + len(BEGIN)] + "\n\n" + table.strip() + "\n\n" + text[j:], encoding="utf-8")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.studies.verdicts",
        description="Write the verdict table(s) of mechanism JSON files as markdown.",
    )
    p.add_argument("json", nargs="+", help="TITLE=PATH or PATH of a JSON holding a 'verdicts' block")
    p.add_argument("--out", type=Path, required=True, help="markdown file to write")
    p.add_argument("--docs", type=Path, default=None, help="also put the table between the markers of this file")
    a = p.parse_args(argv)
    blocks = []
    try:
        for item in a.json:
            title, _, path = item.rpartition("=") if "=" in item else (item, "", item)
            res = json.loads(Path(path).read_text(encoding="utf-8"))
            if "verdicts" not in res:
                raise ValueError(f"{path}: no 'verdicts' block (written by harness mechanism from this version on)")
            blocks.append((title, res["verdicts"]))
        table = verdict_markdown(blocks)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(table, encoding="utf-8")
        if a.docs is not None:
            render_into(a.docs, table)
    except (ValueError, FileNotFoundError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
