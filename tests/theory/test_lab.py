"""The whole lab through the CLI: every claim has a verdict with evidence (its run time is reported in docs/theory.md,
not asserted: timings belong to benchmarks)."""

import json

import pytest

from harness.theory.claim import VERDICTS, claim
from harness.theory.report import CLAIMS

IDS = [
    "lemma_iv1",
    "lemma_iv2",
    "prop_iv1",
    "thm_iv1",
    "thm_v1",
    "thm_v2",
    "cor_v1",
    "prop_vi1",
    "thm_vi1",
    "thm_vi2",
    "thm_vii1",
    "thm_vii2",
    "thm_vii3",
    "thm_vii4",
    "prop_vii1",
    "park_cliplow",
]


def test_claim_record_requires_conditions_or_supported_statement():
    with pytest.raises(ValueError):
        claim("x", "s", "holds under conditions", {}, experiment="e")
    with pytest.raises(ValueError):
        claim("x", "s", "does not hold as stated", {}, experiment="e")
    with pytest.raises(ValueError):
        claim("x", "s", "maybe", {}, experiment="e")


def test_every_claim_is_covered():
    assert [fn.__name__ for fn in CLAIMS] == IDS


def test_harness_theory_cli_writes_full_report(tmp_path):
    from harness.cli import main

    assert main(["theory", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == IDS
    for c in report["claims"]:
        assert c["verdict"] in VERDICTS and c["evidence"] and c["statement"] and c["summary"]
        assert "unavailable" not in c["summary"]
    assert report["method_source"] == "harness"
    for name in (
        "report.md",
        "first_order.png",
        "entropy_reg_term.png",
        "alpha_sensitivity.png",
        "unbiasedness.png",
        "stability_margin.png",
        "cliplow.png",
    ):
        assert (tmp_path / name).stat().st_size > 0


def test_unknown_claim_id_is_a_user_error(tmp_path, capsys):
    from harness.cli import main

    assert main(["theory", "--out", str(tmp_path), "--only", "thm_ix9"]) == 2
    assert "unknown claim id" in capsys.readouterr().err
