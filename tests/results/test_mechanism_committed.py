"""The committed mechanism results are recomputed from the committed raw runs (results/mechanism/**/runs/*.tar.xz:
per-step metrics, eval files, configs and results of every run behind a claim) and compared with a stated
tolerance (harness.results.tolerance: integers, strings and verdicts equal, floats within 1e-9 relative), never
byte for byte: another CPU rounds the pooled sums in other last bits. A run whose data changed must still fail the
comparison (checked by mutation below). The verdict tables in docs/mechanism.md are the ones the committed JSON
files render (issue #23)."""

import json
import tarfile
from pathlib import Path

import pytest

from harness.results.archive import pack
from harness.results.tolerance import file_differences, json_differences
from harness.studies.mechanism import write_mechanism
from harness.studies.theorem import write_theorem
from harness.studies.verdicts import verdict_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "mechanism"
# (folder of archives, committed output folder): `harness mechanism RUNS --out OUT` reproduces OUT/mechanism.json.
# Study B (docs/mechanism_prereg.md, amendment 2): each warm-start level analysed on its own.
# Study B at 500 steps (amendment 3): the same, in family_b_500.
MECHANISM = [("runs", "."), ("family_b/ws150/runs", "family_b/ws150"), ("family_b/ws500/runs", "family_b/ws500")]
MECHANISM += [(f"family_b_500/ws{level}/runs", f"family_b_500/ws{level}") for level in (150, 500)]
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
    (
        "Study B at 500 steps (amendment 3), warm start of 150 supervised steps: pocket-0.1m, GRPO, seeds 3000-3004",
        "family_b_500/ws150/mechanism.json",
    ),
    (
        "Study B at 500 steps (amendment 3), warm start of 500 supervised steps: pocket-0.1m, GRPO, seeds 3000-3004",
        "family_b_500/ws500/mechanism.json",
    ),
]


@pytest.mark.parametrize("runs,out", MECHANISM)
def test_mechanism_json_is_recomputed_from_the_committed_runs(runs, out, tmp_path):
    archives = sorted((RESULTS / runs).glob("*.tar.xz"))
    assert archives, f"no run archive in results/mechanism/{runs}"
    write_mechanism(RESULTS / runs, tmp_path, formats=())
    assert file_differences(RESULTS / out / "mechanism.json", tmp_path / "mechanism.json") == []


def test_theorem_json_is_recomputed_from_the_committed_runs(tmp_path):
    assert sorted((RESULTS / "theorem" / "runs").glob("*.tar.xz"))
    write_theorem(RESULTS / "theorem" / "runs", tmp_path)
    assert file_differences(RESULTS / "theorem" / "theorem.json", tmp_path / "theorem.json") == []


def _floats(x, f):
    if isinstance(x, dict):
        return {k: _floats(v, f) for k, v in x.items()}
    if isinstance(x, list):
        return [_floats(v, f) for v in x]
    return f(x) if isinstance(x, float) else x


def test_last_bit_rounding_passes_and_a_changed_number_fails():
    committed = json.loads((RESULTS / "mechanism.json").read_text())
    n = []
    other_cpu = _floats(committed, lambda v: n.append(v) or v * (1 + 3e-15))  # what another CPU's rounding moves
    assert len(n) > 100 and json_differences(committed, other_cpu) == []
    moved = json_differences({"r": 0.5, "n": 5, "v": "yes"}, {"r": 0.5 + 1e-6, "n": 5, "v": "yes"})
    assert moved == ["$.r: 0.5 vs 0.500001"]
    assert json_differences({"n": 5}, {"n": 5.0}) and json_differences({"v": "reproduces"}, {"v": "inconclusive"})
    assert json_differences([1, 2], [1]) and json_differences({"a": 1}, {"b": 1})


def test_one_changed_run_fails_the_recomputation(tmp_path):
    """Mutation: one metrics value of one run of study B (ws150) changed, re-archived, recomputed: the comparison
    with the committed JSON must fail, so the tolerance cannot hide a change of data."""
    src = tmp_path / "runs"
    with tarfile.open(RESULTS / "family_b" / "ws150" / "runs" / "ws150.tar.xz") as tar:
        tar.extractall(src, filter="data")
    metrics = sorted(src.rglob("metrics.jsonl"))[0]
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[-1]["entropy"] *= 1.01  # one run's last-step entropy moved by 1%
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    archived = tmp_path / "mutated"
    pack(src, archived / "ws150.tar.xz")
    write_mechanism(archived, tmp_path / "out", formats=())
    diffs = file_differences(RESULTS / "family_b" / "ws150" / "mechanism.json", tmp_path / "out" / "mechanism.json")
    assert diffs and any("entropy" in d for d in diffs), diffs


def test_the_docs_show_the_verdicts_the_committed_json_files_hold():
    blocks = [(title, json.loads((RESULTS / path).read_text())["verdicts"]) for title, path in DOC_BLOCKS]
    table = verdict_markdown(blocks).strip()
    assert table in (ROOT / "docs" / "mechanism.md").read_text()
    assert (RESULTS / "verdict_table.md").read_text().strip() == table
