"""One claim's record in report.json."""

from __future__ import annotations

VERDICTS = ("holds", "holds under conditions", "does not hold as stated")


def claim(
    id: str,
    statement: str,
    verdict: str,
    evidence: dict,
    *,
    experiment: str,
    conditions: str | None = None,
    supported: str | None = None,
    figure: str | None = None,
    **extra,
) -> dict:
    """A claim record; ``supported`` is the statement the numbers support when the claim fails as stated."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} not in {VERDICTS}")
    if verdict == "holds under conditions" and not conditions:
        raise ValueError(f"{id}: 'holds under conditions' needs the conditions")
    if verdict == "does not hold as stated" and not supported:
        raise ValueError(f"{id}: a failed claim needs the statement the numbers support")
    rec = {"id": id, "statement": statement, "verdict": verdict, "experiment": experiment, "evidence": evidence}
    if conditions:
        rec["conditions"] = conditions
    if supported:
        rec["supported_statement"] = supported
    if figure:
        rec["figure"] = figure
    rec.update(extra)
    return rec
