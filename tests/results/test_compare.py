"""harness.results.compare: a new leaderboard beside the committed one (what `make quickstart` prints at its end)."""

from pathlib import Path

from harness.results.compare import compare, main, read_cells

ROOT = Path(__file__).resolve().parents[2]
HEAD = (
    "source,model,model_params,task,setting,method,flag,seeds,countdown_mean,countdown_ci,countdown_std,countdown_n,"
    "avg_suites_mean,avg_suites_ci,avg_suites_std,avg_suites_n,entropy_end_mean,entropy_end_ci,entropy_end_std,"
    "entropy_end_n,best\n"
)


def board(folder: Path, *rows: str) -> Path:
    folder.mkdir()
    (folder / "leaderboard.csv").write_text(HEAD + "".join(r + "\n" for r in rows))
    return folder


def test_each_cell_is_judged_against_the_committed_interval(tmp_path):
    old = board(
        tmp_path / "old",
        'runs,pocket-0.3m,333056,countdown,,grpo,,"0,1,2",50,10,4,3,50,10,4,3,0.2,0.05,0.02,3,',
        'runs,pocket-0.3m,333056,countdown,,kl_cov,,"0,1,2",40,5,2,3,40,5,2,3,0.3,0.1,0.04,3,',
        "paper,Qwen2.5-7B,,,,grpo,,,38.6,,,1,38.6,,,1,,,,,",  # a reference row: not a run, not compared
    )
    new = board(
        tmp_path / "new",
        'runs,pocket-0.3m,333056,countdown,,grpo,,"0,1,2",60,12,5,3,60,12,5,3,0.3,0.01,0.01,3,',  # 60 = 50 + 10
        "runs,pocket-0.3m,333056,countdown,,rloo,,0,45,,,1,45,,,1,0.25,,,1,",
    )
    rows, inside, judged = compare(read_cells(old), read_cells(new))
    assert rows == [
        ["pocket-0.3m", "grpo", "countdown", "50 ± 10 (n=3)", "60 ± 12 (n=3)", "yes"],  # on the bound: inside
        ["pocket-0.3m", "grpo", "entropy_end", "0.2 ± 0.05 (n=3)", "0.3 ± 0.01 (n=3)", "**no** (+0.1)"],
        ["pocket-0.3m", "kl_cov", "countdown", "40 ± 5 (n=3)", "—", "missing in new"],
        ["pocket-0.3m", "kl_cov", "entropy_end", "0.3 ± 0.1 (n=3)", "—", "missing in new"],
        ["pocket-0.3m", "rloo", "countdown", "—", "45 (n=1)", "missing in committed"],
        ["pocket-0.3m", "rloo", "entropy_end", "—", "0.25 (n=1)", "missing in committed"],
    ]  # the committed order, then new rows; avg_suites is left out (it repeats the suites)
    assert (inside, judged) == (1, 2)


def test_a_one_seed_committed_cell_has_no_interval(tmp_path):
    old = board(tmp_path / "old", "runs,pocket-1m,1,countdown,,grpo,,0,50,,,1,50,,,1,0.2,,,1,")
    rows, inside, judged = compare(read_cells(old), read_cells(old))
    assert [r[-1] for r in rows] == ["no interval (n = 1)"] * 2 and (inside, judged) == (0, 0)


def test_the_committed_quickstart_against_itself_is_inside_everywhere(capsys):
    committed = ROOT / "results" / "quickstart"
    assert main([str(committed), str(committed)]) == 0
    out = capsys.readouterr().out
    assert "42 of 42 new means fall inside" in out  # 14 rows x (countdown, H start, H end), 3 seeds each
    assert "**no**" not in out


def test_a_missing_leaderboard_is_one_error_line(tmp_path, capsys):
    assert main([str(ROOT / "results" / "quickstart"), str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nothing/leaderboard.csv: cannot read" in err[0]


def test_a_csv_that_is_not_a_leaderboard_is_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "leaderboard.csv").write_text("a,b\n1,2\n")
    assert main([str(tmp_path / "x"), str(tmp_path / "x")]) == 2
    assert "not a leaderboard csv" in capsys.readouterr().err
