"""Provenance in the results code: collected per run, data versions checked per leaderboard row, the column."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

from harness.cli import main
from harness.results.collect import collect
from harness.results.table import build_leaderboard, render

SHA_A = "a" * 64
SHA_B = "b" * 64
SHA_T = "c0ffee" + "0" * 58


def with_provenance(run_dir, commit="1a2b3c4d5e6f7a8b9c0d", dirty=False, datasets=None):
    """Add the ``provenance`` object harness.provenance.collect writes to a fixture run's result.json."""
    path = run_dir / "result.json"
    res = json.loads(path.read_text())
    entries = [
        {"name": k, "source": None, "revision": None, "sha256": v, "rows": 3}
        for k, v in (datasets if datasets is not None else {"arith": SHA_A}).items()
    ]
    res["provenance"] = {
        "git_commit": commit,
        "git_dirty": dirty,
        "packages": {},
        "datasets": entries,
        "hardware": {},
        "created": "2026-12-03T00:00:00Z",
    }
    path.write_text(json.dumps(res))
    return run_dir


def row(lb, method):
    return lb.rows[lb.rows["method"] == method].iloc[0]


def test_collect_reads_provenance(runs_root, mk):
    with_provenance(mk(runs_root, "new", seed=0), dirty=True, datasets={"arith": SHA_A, "countdown": SHA_T})
    mk(runs_root, "old", seed=1)
    runs = collect([runs_root]).runs.set_index("seed")
    assert runs.at[0, "git_commit"] == "1a2b3c4d5e6f7a8b9c0d" and runs.at[0, "git_dirty"] is True
    assert json.loads(runs.at[0, "datasets"]) == {"arith": SHA_A, "countdown": SHA_T}
    assert pd.isna(runs.at[1, "git_commit"]) and pd.isna(runs.at[1, "datasets"])  # missing, as every missing value


def test_eval_only_results_provenance(runs_root, suite):
    d = runs_root / "base"
    d.mkdir(parents=True)
    prov = {
        "git_commit": "ffff000011112222",
        "git_dirty": False,
        "datasets": [{"name": "arith", "sha256": SHA_B, "revision": None}],
    }
    d.joinpath("results.json").write_text(
        json.dumps({"model": "m", "engine": "hf", "provenance": prov, "suites": {"arith": suite("arith", 0.4)}})
    )
    lb = build_leaderboard(collect([runs_root]), provenance=True)
    assert row(lb, "eval-only")["provenance"] == "git ffff000 · data bbbbbbbb"


def test_row_pooling_different_data_is_refused(runs_root, mk):
    with_provenance(mk(runs_root, "s0", seed=0), datasets={"arith": SHA_A})
    with_provenance(mk(runs_root, "s1", seed=1), datasets={"arith": SHA_B})
    with_provenance(mk(runs_root, "s2", seed=2), datasets={"arith": SHA_A})
    col = collect([runs_root])
    with pytest.raises(ValueError) as e:
        build_leaderboard(col)
    msg = str(e.value)
    assert "dataset 'arith' in 2 versions" in msg and "--allow-mixed-data" in msg
    assert f"sha256 {SHA_A[:12]} in {runs_root / 's0'}, {runs_root / 's2'}" in msg
    assert f"sha256 {SHA_B[:12]} in {runs_root / 's1'}" in msg
    lb = build_leaderboard(col, allow_mixed_data=True, provenance=True)
    assert row(lb, "grpo")["arith_n"] == 3  # pooled, as asked
    assert any(n.startswith("FLAG: rows pool runs that read different data") for n in lb.notes)
    assert row(lb, "grpo")["provenance"] == "git 1a2b3c4 · data aaaaaaaa, bbbbbbbb"


def test_same_data_pools_and_the_column_shows_it(runs_root, mk, suite):
    two = {"arith": SHA_A, "countdown": SHA_T}
    with_provenance(mk(runs_root, "g0", seed=0), datasets=two)
    swapped = dict(reversed(two.items()))  # key order does not matter
    with_provenance(mk(runs_root, "g1", seed=1), commit="9f9f9f9f9f9f", dirty=True, datasets=swapped)
    mk(runs_root, "k0", method="kl_cov", seed=0)  # an older run: no provenance
    lb = build_leaderboard(collect([runs_root]), provenance=True)
    assert row(lb, "grpo")["arith_n"] == 2
    joint = hashlib.sha256(f"arith={SHA_A}\ncountdown={SHA_T}\n".encode()).hexdigest()[:8]
    assert row(lb, "grpo")["provenance"] == f"git 1a2b3c4, 9f9f9f9+dirty · data {joint}"
    assert row(lb, "kl_cov")["provenance"] == "1 run(s) unrecorded"
    assert [n for n in lb.notes if n.startswith("PROVENANCE:")] == [
        f"PROVENANCE: 1 of 3 run(s) carry no provenance (written before it was recorded): their data versions "
        f"cannot be checked; pooled as before: {runs_root / 'k0'}"
    ]
    md = render(lb, "md")
    assert md.splitlines()[0].endswith("| provenance |") and f"data {joint}" in md
    assert "provenance" in render(lb, "csv").splitlines()[0].split(",")
    assert "provenance" not in render(build_leaderboard(collect([runs_root])), "md").splitlines()[0]
    assert "provenance" not in render(build_leaderboard(collect([runs_root])), "csv").splitlines()[0]
    tex = render(lb, "tex")
    assert tex.splitlines()[0].endswith("rrrrl}")  # 2 averages + 2 deltas + 1 suite right, provenance left


def test_old_runs_pool_as_before(runs_root, mk):
    mk(runs_root, "a", seed=0)
    mk(runs_root, "b", seed=1)
    lb = build_leaderboard(collect([runs_root]))
    assert row(lb, "grpo")["arith_n"] == 2
    assert any(n.startswith("PROVENANCE: 2 of 2 run(s) carry no provenance") for n in lb.notes)


def test_cli_table_flags(runs_root, mk, capsys):
    with_provenance(mk(runs_root, "s0", seed=0), datasets={"arith": SHA_A})
    with_provenance(mk(runs_root, "s1", seed=1), datasets={"arith": SHA_B})
    assert main(["table", str(runs_root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: runs pooled into one row read different data") and len(err.splitlines()) == 1
    assert main(["table", str(runs_root), "--allow-mixed-data", "--provenance"]) == 0
    out = capsys.readouterr().out
    assert "git 1a2b3c4 · data aaaaaaaa, bbbbbbbb" in out and "FLAG: rows pool runs" in out


def test_rows_compared_across_data_versions_are_flagged(runs_root, mk):
    with_provenance(mk(runs_root, "g", seed=0), datasets={"arith": SHA_A})
    with_provenance(mk(runs_root, "k", method="kl_cov", seed=0), datasets={"arith": SHA_B})
    lb = build_leaderboard(collect([runs_root]))  # each row is one data version: not refused
    (note,) = [n for n in lb.notes if n.startswith("FLAG: rows compared")]
    assert note.endswith(f"pocket-1m: dataset 'arith' ({SHA_A[:12]}: grpo; {SHA_B[:12]}: kl_cov)")
