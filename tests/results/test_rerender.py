"""A committed leaderboard.md re-rendered from its leaderboard.csv (python -m harness.results.rerender): the same
table and notes harness report writes from the runs, old marks of a 3-seed table removed, a table whose marks need
the runs refused, and the committed quickstart up to date."""

import shutil
from pathlib import Path

from harness.results.report import write_sweep_report
from harness.results.rerender import RERENDERED, main, rerender

ROOT = Path(__file__).resolve().parents[2]


def _report(root, mk, suite, tmp_path, seeds=3):
    for s in range(seeds):
        mk(root, f"grpo{s}", method="grpo", seed=s, suites={"A": suite("A", 0.50 + 0.01 * s)})
        mk(root, f"kl{s}", method="kl_cov", seed=s, suites={"A": suite("A", 0.60 + 0.01 * s + 0.005 * (s == 1))})
    out = tmp_path / "report"
    write_sweep_report(root, out, formats=("png",))
    return out


def test_rerender_from_the_csv_is_what_the_report_wrote_and_old_marks_go(runs_root, mk, suite, tmp_path):
    out = _report(runs_root, mk, suite, tmp_path)
    written = (out / "leaderboard.md").read_text()
    assert "+10.2 ± 0.7 |" in written and "**" not in written  # the Δ interval excludes 0; 3 seeds: no mark
    old = written.replace("+10.2 ± 0.7 |", "**+10.2 ± 0.7** |")  # as the rule before issue 35 marked it
    old = old.replace(next(x for x in old.splitlines() if x.startswith("- MARKS:")) + "\n", "")
    (out / "leaderboard.md").write_text(old)
    rerender(out)
    lines = written.splitlines()
    at = max(i for i, x in enumerate(lines[: lines.index("## Figures")]) if x.startswith("- "))  # the last note
    expected = lines[: at + 1] + ["- " + RERENDERED] + lines[at + 1 :]
    assert (out / "leaderboard.md").read_text().splitlines() == expected
    rerender(out)  # idempotent
    assert (out / "leaderboard.md").read_text().splitlines() == expected


def test_a_table_whose_marks_need_a_test_is_refused(runs_root, mk, suite, tmp_path, capsys):
    out = _report(runs_root, mk, suite, tmp_path, seeds=5)
    before = (out / "leaderboard.md").read_text()
    assert main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a row has 5 seeds (>= 5): its marks need a test on the runs' per-seed" in err
    assert (out / "leaderboard.md").read_text() == before


def test_the_committed_quickstart_leaderboard_is_current(tmp_path):
    """results/quickstart's runs are not committed: its leaderboard.md is the re-rendering of its csv."""
    copy = tmp_path / "quickstart"
    shutil.copytree(ROOT / "results" / "quickstart", copy)
    rerender(copy)
    committed = (ROOT / "results" / "quickstart" / "leaderboard.md").read_text()
    assert (copy / "leaderboard.md").read_text() == committed
    assert "**" not in committed.split("## Figures")[0] and "at most 3 seed(s) per arm" in committed
