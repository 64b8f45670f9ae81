"""The committed rescue study (results/rescue, docs/rescue_prereg.md) recomputes from its committed raw runs
(results/rescue/runs/*.tar.xz) within the stated tolerance (harness.results.tolerance), never byte for byte, and
its verdict table in docs/mechanism.md is the one the committed JSON renders; a changed run fails."""

import json
import tarfile
from pathlib import Path

from harness.results.tolerance import file_differences, json_differences
from harness.studies.rescue import analyse, write

ROOT = Path(__file__).resolve().parents[2]
RESCUE = ROOT / "results" / "rescue"


def test_rescue_json_recomputes_from_the_committed_runs(tmp_path):
    assert sorted((RESCUE / "runs").glob("*.tar.xz")), "no raw runs committed for the rescue study"
    res = write(RESCUE / "runs", tmp_path)
    assert res["n"] == 30 and res["excluded"] == []
    assert file_differences(RESCUE / "rescue.json", tmp_path / "rescue.json") == []
    table = (tmp_path / "rescue.md").read_text().split("\n\n**Is KL-Cov")[0].strip()
    assert table in (ROOT / "docs" / "mechanism.md").read_text()


def test_a_changed_run_fails_the_comparison(tmp_path):
    (archive,) = (RESCUE / "runs").glob("*.tar.xz")
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(tmp_path / "runs", filter="data")
    (metrics,) = (tmp_path / "runs").glob("kl_cov__s2000__*/metrics.jsonl")
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    rows[-1]["entropy/generated"] *= 1.01  # one step's entropy of one run, 1% higher
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    committed = json.loads((RESCUE / "rescue.json").read_text())
    assert json_differences(committed, analyse(tmp_path / "runs")) != []
