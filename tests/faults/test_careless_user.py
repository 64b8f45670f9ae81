"""Issue 37, what a careless user still got wrong silently, met the way a user meets it: through ``harness ...`` on
real tiny pocket runs, a real sweep (debug executor), a real export and eval. Each test says what happened before.
Item 6 and items 8a-8c (another backend's keys, an empty config, lr 0, scientific notation) are in
test_silent_config.py; issue 35's start stamp is in test_provenance_stamp.py."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from tests.helpers.sweep_targets import tiny_pocket_base
from tests.helpers.wheel import build_wheel

PLACE = "its readers would take the output for run files: write it outside run and sweep directories"


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ")


def _files(d: Path) -> dict[str, bytes]:
    """Every file under ``d`` with its bytes (a refusal leaves them all), the lock file aside."""
    return {
        str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".run.lock"
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A finished run (RUN), its export (EXPORT), a finished one-cell sweep (SW) and its spec, in one folder."""
    root = tmp_path_factory.mktemp("careless")
    (root / "run.yaml").write_text(yaml.safe_dump(tiny_pocket_base(steps=2)))
    (root / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "run.yaml", "seeds": [0]}))
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main(["train", "run.yaml", "--run-dir", "RUN"]) == 0
        assert main(["export", "RUN", "--out", "EXPORT"]) == 0
        assert main(["sweep", "s.yaml", "--runs-dir", "SW", "--executor", "debug", "--no-progress"]) == 0
    finally:
        os.chdir(cwd)
    shutil.rmtree(root / ".harness", ignore_errors=True)  # the sweep index: item 8's status test makes its own
    return root


@pytest.fixture
def w(world, tmp_path, monkeypatch):
    """A copy of the world to change, as the current directory."""
    root = tmp_path / "w"
    shutil.copytree(world, root, symlinks=True)
    monkeypatch.chdir(root)
    return root


# ------------------------------------------------------------------------ item 1: config.yaml is the run's identity
def test_an_edited_config_yaml_is_refused_naming_the_changed_key_and_readers_flag_it(w, capsys):
    """Before: ``train RUN/config.yaml --run-dir RUN`` said "already completed" (exit 0) for a config.yaml edited
    after training, and table and site showed the edited lr beside numbers trained at the old one."""
    cfg = w / "RUN" / "config.yaml"
    rid = json.loads((w / "RUN" / "result.json").read_text())["run_id"]
    text = cfg.read_text()
    assert "  lr: 0.0005\n" in text
    cfg.write_text(text.replace("  lr: 0.0005\n", "  lr: 0.001\n"))
    before = _files(w / "RUN")
    for extra in ([], ["--dry-run"]):
        assert main(["train", "RUN/config.yaml", "--run-dir", "RUN", *extra]) == 2
        err = _one_error(capsys)
        new = re.search(r"config.yaml gives run ([0-9a-f]{12})", err).group(1)
        assert new != rid
        assert err == (
            f"run directory RUN: its config.yaml is not the config of the run it holds: provenance.json and "
            f"result.json record run {rid}, config.yaml gives run {new} (edited after the run started: train.lr: "
            f"0.0005 -> 0.001). Restore its config.yaml, use another --run-dir, or --force to move the old run to "
            f"RUN/replaced/"
        )
        assert _files(w / "RUN") == before  # nothing changed
    assert main(["train", "run.yaml", "--run-dir", "RUN"]) == 2  # the config it was trained with: refused too
    assert "train.lr: 0.0005 -> 0.001" in _one_error(capsys)
    # the readers: a warning naming the edit, and the run's settings from result.json, not the edited file
    assert main(["table", "RUN", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert "warning: RUN: its config.yaml is not the config of the run it holds: provenance.json and " in err
    assert "train.lr" not in out
    assert main(["site", "RUN", "--out", "SITE"]) == 0
    page = next((w / "SITE").glob("*/runs/*.html")).read_text()
    assert "# WARNING: its config.yaml is not the config of the run it holds" in page
    # restored: the same run again, "already completed" (exit 0)
    cfg.write_text(text)
    capsys.readouterr()
    assert main(["train", "RUN/config.yaml", "--run-dir", "RUN"]) == 0
    assert f"RUN: already completed (run {rid})" in capsys.readouterr().err


def test_force_moves_the_run_of_an_edited_config_aside_and_trains_the_edited_one(w, capsys):
    cfg = w / "RUN" / "config.yaml"
    rid = json.loads((w / "RUN" / "result.json").read_text())["run_id"]
    cfg.write_text(cfg.read_text().replace("  lr: 0.0005\n", "  lr: 0.001\n"))
    assert main(["train", "RUN/config.yaml", "--run-dir", "RUN", "--force"]) == 0
    (old,) = (w / "RUN" / "replaced").iterdir()
    assert old.name.startswith(f"{rid}-") and (old / "result.json").is_file() and (old / "provenance.json").is_file()
    new = json.loads((w / "RUN" / "result.json").read_text())["run_id"]
    assert new != rid and json.loads((w / "RUN" / "provenance.json").read_text())["run_id"] == new


# ------------------------------------------------------------------------ item 2: outputs inside runs and sweeps
CELL = "SW/{cell}"
OUTPUTS = [
    (["report", "SW", "--out", "SW"], "--out SW: {SW} is a sweep runs directory"),
    (["report", "SW", "--out", "SW/rep"], "--out SW/rep: it would be inside the sweep runs directory {SW}"),
    (["report", "SW", "--out", "RUN"], "--out RUN: {RUN} is a run directory"),
    (["table", "RUN", "--out", "RUN/lb.md"], "--out RUN/lb.md: it would be inside the run directory {RUN}"),
    (["table", "SW", "--out", "SW/lb.md"], "--out SW/lb.md: it would be inside the sweep runs directory {SW}"),
    (["plot", "RUN", "--out", "RUN/plots"], "--out RUN/plots: it would be inside the run directory {RUN}"),
    (["mechanism", "SW", "--out", "SW/mech"], "--out SW/mech: it would be inside the sweep runs directory {SW}"),
    (
        ["eval", "--model", "EXPORT", "--suites", "arith", "--out", "RUN"],
        "--out RUN: {RUN} is a run directory",
    ),
    (
        ["eval", "--model", "EXPORT", "--suites", "arith", "--out", CELL],
        "--out SW/{cell}: {SW}/{cell} is a run directory",
    ),
    (["site", "RUN", "--out", "RUN/site"], "--out RUN/site: it would be inside the run directory {RUN}"),
    (["export", "RUN", "--out", "RUN/exported"], "--out RUN/exported: it would be inside the run directory {RUN}"),
    (
        ["sweep", "s.yaml", "--runs-dir", "SW", "--executor", "debug", "--results-dir", "SW/report", "--dry-run"],
        "--results-dir SW/report: it would be inside the sweep runs directory {SW}",
    ),
]


@pytest.mark.parametrize(
    "argv, message", OUTPUTS, ids=[f"{a[0]}:{a[a.index('--out') + 1] if '--out' in a else a[-2]}" for a, _ in OUTPUTS]
)
def test_no_output_is_written_into_a_run_or_a_sweep(w, capsys, argv, message):
    """Before: report --out SWEEP wrote 11 files into the sweep, and table/plot/eval --out RUN wrote into the run;
    only report into a run was refused. One rule now (harness.run.rundir.check_output_place), nothing written."""
    cell = next(p.parent.name for p in (w / "SW").glob("*/cell.json"))
    before = {d: _files(w / d) for d in ("RUN", "SW")}
    assert main([a.replace("{cell}", cell) for a in argv]) == 2
    expected = message.format(SW=w / "SW", RUN=w / "RUN", cell=cell)
    assert _one_error(capsys) == f"{expected}; {PLACE}"
    assert {d: _files(w / d) for d in ("RUN", "SW")} == before


def test_a_sweep_results_dir_inside_its_own_new_runs_dir_is_refused(w, capsys):
    cmd = ["sweep", "s.yaml", "--runs-dir", "NEW", "--executor", "debug", "--results-dir", "NEW/rep", "--dry-run"]
    assert main(cmd) == 2
    assert _one_error(capsys) == (
        "--results-dir NEW/rep: it would be inside this sweep's runs directory NEW; write it outside run and sweep "
        "directories"
    )
    assert not (w / "NEW").exists()


# ------------------------------------------------------------------------ item 3: --run-dir . in the project
def test_a_run_dir_holding_foreign_files_is_refused(w, capsys, monkeypatch):
    """Before: ``harness train CFG --run-dir .`` in the project root trained there, and every default runs/...
    path was then refused as "inside the run directory" until the files were deleted by hand."""
    proj = w / "proj"
    (proj / "harness").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\n")
    (proj / ".git").mkdir()
    monkeypatch.chdir(proj)
    before = _files(proj)
    for extra in (["--dry-run"], []):
        assert main(["train", str(w / "run.yaml"), "--run-dir", ".", *extra]) == 2
        assert _one_error(capsys) == (
            f"{proj} holds files that are not a run's (.git, harness, pyproject.toml); a run directory is written "
            "by the trainer: give a new or empty folder"
        )
    assert _files(proj) == before and sorted(p.name for p in proj.iterdir()) == [".git", "harness", "pyproject.toml"]
    # a new, an empty, or a run's folder (a config.yaml written by hand included) is still a run directory
    (proj / "empty").mkdir()
    (proj / "mine").mkdir()
    shutil.copyfile(w / "run.yaml", proj / "mine" / "config.yaml")
    for rd in ("new", "empty", "mine"):
        assert main(["train", str(w / "run.yaml"), "--run-dir", rd, "--dry-run"]) == 0
    assert main(["train", "mine/config.yaml", "--run-dir", "mine", "--dry-run"]) == 0


# ------------------------------------------------------------------------ item 4: an export's eval and its run
def test_the_eval_of_a_runs_export_joins_its_run_and_different_data_is_marked(w, capsys):
    """Before: ``table RUN EVAL_OF_ITS_EXPORT`` refused ("dataset ... in 2 versions": the run's training data
    against the eval's test problems), and --allow-mixed-data counted the one run as two seeds (n=2)."""
    assert main(["eval", "--model", "EXPORT", "--suites", "arith", "--out", "EVAL"]) == 0
    capsys.readouterr()
    assert main(["table", "RUN", "EVAL", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    rows = [r for r in out.splitlines()[1:] if r.startswith("runs,")]
    assert len(rows) == 1 and ",grpo," in rows[0]
    header = out.splitlines()[0].split(",")
    assert rows[0].split(",")[header.index("arith_n")] == "1"  # one run, one seed
    rid = json.loads((w / "RUN" / "result.json").read_text())["run_id"]
    assert err.strip() == (
        f"warning: EVAL: harness eval of the export of run {rid}, read with the run itself (RUN): one run, counted "
        "once; its arith score from this eval (the final policy's)"
    )
    # rows whose runs trained on different data: compared, and marked
    assert main(["train", "run.yaml", "method.name=kl_cov", "task.test_size=3", "--run-dir", "KL"]) == 0
    capsys.readouterr()
    assert main(["table", "RUN", "KL"]) == 0
    out = capsys.readouterr().out
    assert (
        "- FLAG: rows compared with each other read different data versions, so their differences include the "
        "data's: pocket-0.3m: dataset 'arith' (" in out
    )


# ------------------------------------------------------------------------ item 5: the site folder
def _links_leaving(site: Path) -> list[str]:
    out = []
    for page in site.rglob("*.html"):
        for link in re.findall(r'(?:href|src)="([^"#?]+)', page.read_text()):
            if link.startswith(("http:", "https:", "data:", "mailto:")):
                continue
            target = (page.parent / link.replace("&amp;", "&")).resolve()
            if not target.is_relative_to(site.resolve()) or not target.exists():
                out.append(f"{page.relative_to(site)} -> {link}")
    return out


def test_the_site_keeps_what_it_did_not_write_and_no_link_leaves_it(w, capsys):
    """Before: a rebuild deleted a user's NOTES.md and mine/ in the site folder, and the pages linked to the results
    folder's figures and files by relative paths leaving the site."""
    assert main(["report", "SW", "--out", "REP", "--formats", "png"]) == 0
    assert main(["site", "REP", "RUN", "--out", "SITE"]) == 0
    site = w / "SITE"
    assert _links_leaving(site) == [] and any((site / "REP" / "figures").glob("*.png"))
    assert (site / "REP" / "files" / "skipped.txt").read_bytes() == (w / "REP" / "skipped.txt").read_bytes()
    (site / "NOTES.md").write_text("my notes")
    (site / "mine").mkdir()
    (site / "mine" / "data.txt").write_text("keep")
    assert main(["site", "REP", "--out", "SITE"]) == 0  # rebuilt without the run: its pages go, the user's stay
    assert (site / "NOTES.md").read_text() == "my notes" and (site / "mine" / "data.txt").read_text() == "keep"
    assert not (site / "RUN").exists() and (site / "REP" / "index.html").is_file()
    moved = w / "elsewhere" / "SITE"
    moved.parent.mkdir()
    site.rename(moved)  # a site opens wherever it is
    assert _links_leaving(moved) == []
    moved.rename(site)
    (site / "RUN").write_text("mine too")  # in the way of a page the next build writes
    before = _files(site)
    capsys.readouterr()
    assert main(["site", "REP", "RUN", "--out", "SITE"]) == 2
    assert _one_error(capsys) == (
        "--out SITE: SITE/RUN was not written by harness site and the new site writes RUN/index.html; move it away "
        "and rebuild (nothing was changed)"
    )
    assert _files(site) == before


# ------------------------------------------------------------------------ item 7: errors that point the wrong way
def test_eval_names_a_missing_model_before_its_suites(w, capsys):
    """Before: "unknown suite 'countdown'" (an exported run's suite comes with the model it could not find)."""
    assert main(["eval", "--model", "/nonexistent", "--suites", "countdown"]) == 2
    assert _one_error(capsys) == "model path /nonexistent does not exist"


def test_an_override_after_a_flag_is_taken_and_an_unknown_flag_gets_the_commands_usage(w, capsys):
    """Before: ``train CFG --dry-run train.steps=3`` said "unrecognized arguments" under the top-level usage."""
    assert main(["train", "run.yaml", "--dry-run", "train.steps=3"]) == 0
    assert yaml.safe_load(capsys.readouterr().out.split("\n# run id", 1)[0])["train"]["steps"] == 3
    assert main(["train", "run.yaml", "train.steps=3", "--run-dir", "R", "method.name=kl_cov", "--dry-run"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out.split("\n# run id", 1)[0])
    assert shown["train"]["steps"] == 3 and shown["method"]["name"] == "kl_cov"
    with pytest.raises(SystemExit) as e:
        main(["train", "run.yaml", "--dry-run", "train.steps=3", "--bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: harness train ") and err.endswith(
        "harness train: error: unrecognized arguments: --bogus\n"
    )
    with pytest.raises(SystemExit):
        main(["data", "check", "x.jsonl", "--bogus"])
    assert "harness data check: error: unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, where",
    [
        (["data", "prepare", "dapo-math-17k", "--source", "latin1.jsonl", "--out", "D"], "--source latin1.jsonl:1"),
        (["data", "check", "latin1.jsonl"], "latin1.jsonl:1"),
        (["grade", "--input", "latin1.jsonl", "--output", "G.jsonl"], "latin1.jsonl:1"),
    ],
)
def test_a_reader_of_a_non_utf8_file_names_it(w, capsys, argv, where):
    """Before (the code before the restructure): a bare "'utf-8' codec can't decode byte 0xe9 in position 15"."""
    (w / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    assert main(argv) == 2
    assert _one_error(capsys) == f"{where}: not UTF-8 text (byte 0xe9 at column 16)"
    assert not (w / "D").exists() and not (w / "G.jsonl").exists()


# ------------------------------------------------------------------------ item 8: silent defaults
@pytest.mark.parametrize(
    "content, message",
    [
        (
            '{"question": "1+1", "solution": "2"}\n{"question": "1+2", "solution": "3"}\n',
            "dapo-math-17k: wrongcols.jsonl: no row has the column(s) prompt, reward_model, ability (found: question, "
            "solution); dapo-math-17k reads the BytedTsinghua-SIA/DAPO-Math-17k schema (prompt, reward_model, "
            "ability); nothing written",
        ),
        ("", "dapo-math-17k: wrongcols.jsonl: no rows; nothing written"),
    ],
    ids=["other-columns", "empty-file"],
)
def test_data_prepare_names_missing_columns_and_an_empty_file(w, capsys, content, message):
    """Before: "no row left of 2 (not_math 2)" and "no row left of 0 ()"."""
    (w / "wrongcols.jsonl").write_text(content)
    assert main(["data", "prepare", "dapo-math-17k", "--source", "wrongcols.jsonl", "--out", "D"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"
    assert not (w / "D").exists()


def test_a_suite_listed_twice_is_refused(w, capsys):
    """Before: ``--suites countdown,countdown`` scored and printed the suite twice; eval.suites kept both."""
    assert main(["eval", "--model", "EXPORT", "--suites", "arith,arith", "--out", "E"]) == 2
    assert _one_error(capsys) == "suite 'arith' is listed 2 times; list each suite once"
    assert main(["train", "run.yaml", "eval.suites=[pocket_arith,pocket_arith]", "--dry-run"]) == 2
    assert _one_error(capsys) == "eval.suites: suite 'pocket_arith' is listed 2 times; list each suite once"
    assert not (w / "E").exists()


def test_status_understands_a_run_directory_and_where_a_spec_was_submitted(w, capsys):
    """Before: ``status RUN`` said "no cell directories (cell.json) here"; ``status SPEC`` of a sweep submitted
    with --runs-dir showed every cell "pending / not submitted" from the default runs/<name>."""
    rid = json.loads((w / "RUN" / "result.json").read_text())["run_id"]
    assert main(["status", "RUN"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "RUN: a run directory, done",
        "state    cell  id           job detail",
        f"done     RUN   {rid} -",
    ]
    cell = next((w / "SW").glob("*/cell.json")).parent
    assert main(["status", str(cell)]) == 0
    assert capsys.readouterr().out.startswith(f"{cell}: a run directory, done\n")
    assert main(["status", "s.yaml"]) == 0  # submitted before the index existed: said, not silent
    out, err = capsys.readouterr()
    assert out.startswith("runs/s: 1 cells: pending 1") and "note: runs/s does not exist" in err
    assert main(["sweep", "s.yaml", "--runs-dir", "SW", "--executor", "debug", "--no-progress"]) == 0
    capsys.readouterr()
    (w / "elsewhere").mkdir()
    assert main(["status", "s.yaml"]) == 0  # the recorded runs directory
    assert capsys.readouterr().out.startswith(f"{w / 'SW'}: 1 cells: done 1, failed 0")


# ------------------------------------------------------------------------ item 9: a quiet set-up
def test_building_the_package_is_quiet_and_ships_the_data_folders(tmp_path):
    """Before: ``pip wheel -q`` (and make setup) printed 164 lines of setuptools "Package would be ignored"
    warnings, one block per data folder (samples, assets, fixtures, lm-eval tasks) missing from the package list."""
    pytest.importorskip("setuptools")
    out, wheel = build_wheel(tmp_path)
    assert wheel is not None, out.stderr[-2000:]
    assert out.stdout + out.stderr == ""
