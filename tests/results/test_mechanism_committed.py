"""The committed mechanism results are recomputed from the committed raw runs (results/mechanism/**/runs/*.tar.xz:
per-step metrics, eval files, configs and results of every run behind a claim), byte for byte, and the verdict
tables in docs/mechanism.md are the ones the committed JSON files render (issue #23)."""

import json
from pathlib import Path

import pytest

from harness.results.mechanism import write_mechanism
from harness.results.mechanism_theorem import write_theorem
from harness.results.mechanism_verdicts import verdict_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "mechanism"
# (folder of archives, committed output folder): `harness mechanism RUNS --out OUT` reproduces OUT/mechanism.json.
# Study B (docs/mechanism_prereg.md, amendment 2): each warm-start level analysed on its own.
MECHANISM = [("runs", "."), ("family_b/ws150/runs", "family_b/ws150"), ("family_b/ws500/runs", "family_b/ws500")]
DOC_BLOCKS = [
    ("Study A: ordered countdown, pocket-0.3m, GRPO and KL-Cov, seeds 1000-1004", "mechanism.json"),
    ("Theorem ladder: first-order rung (GRPO, pocket-0.3m, one update per rollout)", "theorem/theorem.json"),
    (
        "Study B, warm start of 150 supervised steps: unordered 4-number countdown, pocket-0.1m, GRPO, seeds 1000-1004",
        "family_b/ws150/mechanism.json",
    ),
    (
        "Study B, warm start of 500 supervised steps: unordered 4-number countdown, pocket-0.1m, GRPO, seeds 1000-1004",
        "family_b/ws500/mechanism.json",
    ),
]


@pytest.mark.parametrize("runs,out", MECHANISM)
def test_mechanism_json_is_recomputed_from_the_committed_runs(runs, out, tmp_path):
    archives = sorted((RESULTS / runs).glob("*.tar.xz"))
    assert archives, f"no run archive in results/mechanism/{runs}"
    write_mechanism(RESULTS / runs, tmp_path, formats=())
    assert (tmp_path / "mechanism.json").read_text() == (RESULTS / out / "mechanism.json").read_text()


def test_theorem_json_is_recomputed_from_the_committed_runs(tmp_path):
    assert sorted((RESULTS / "theorem" / "runs").glob("*.tar.xz"))
    write_theorem(RESULTS / "theorem" / "runs", tmp_path)
    assert (tmp_path / "theorem.json").read_text() == (RESULTS / "theorem" / "theorem.json").read_text()


def test_the_docs_show_the_verdicts_the_committed_json_files_hold():
    blocks = [(title, json.loads((RESULTS / path).read_text())["verdicts"]) for title, path in DOC_BLOCKS]
    table = verdict_markdown(blocks).strip()
    assert table in (ROOT / "docs" / "mechanism.md").read_text()
    assert (RESULTS / "verdict_table.md").read_text().strip() == table
