"""Issue 35, provenance stamped when a run starts: runs of a real copy of the project in its own git repository
(``harness`` imported from there, so the stamp describes that checkout). Before, ``git_commit``/``git_dirty`` were
stamped when the run ended, and an untracked file (a method added in a new file, the README's way) left it clean."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness import provenance
from tests.helpers.sweep_targets import tiny_pocket_base

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("harness", "methods", "baselines", "evals", "sweeps", "scripts")  # = provenance.CODE_FOLDERS
KILL_AFTER_STEP_1 = r"""
import os, signal, sys
from harness.backends.pocket import trainer
save = trainer.PocketTrainer.save_checkpoint
def save_then_die(self, step):
    save(self, step)
    if step == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the node is lost right after this checkpoint
trainer.PocketTrainer.save_checkpoint = save_then_die
from harness.cli import main
main(["train", sys.argv[1], "--run-dir", sys.argv[2]])
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A committed copy of the project's code folders (and .gitignore), a clean work tree."""
    d = tmp_path / "project"
    d.mkdir()
    shutil.copyfile(ROOT / ".gitignore", d / ".gitignore")
    for name in CODE_FOLDERS:
        shutil.copytree(ROOT / name, d / name, ignore=shutil.ignore_patterns("__pycache__"))
    git(d, "init", "-q")
    git(d, "add", "-A")
    git(d, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the project")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(tiny_pocket_base(steps=3)))
    return d


def harness(repo: Path, *argv: str, script: str | None = None) -> subprocess.CompletedProcess:
    """``harness ARGV`` (or ``script`` with ARGV) with the package imported from ``repo``, run in its parent."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    code = script if script is not None else "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=repo.parent, env=env, capture_output=True, text=True, timeout=300
    )


def test_an_untracked_code_file_makes_the_run_dirty_and_the_stamp_is_the_runs(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    p = harness(repo, "train", "run.yaml", "--run-dir", "clean")
    assert p.returncode == 0, p.stderr[-2000:]
    clean = json.loads((repo.parent / "clean" / "result.json").read_text())["provenance"]
    assert (clean["git_commit"], clean["git_dirty"], clean["git_diff_sha256"], clean["untracked"]) == (
        head,
        False,
        None,
        [],
    )
    (repo / "methods" / "my_method.py").write_text("X = 1\n")  # a new method, not yet committed
    p = harness(repo, "train", "run.yaml", "--run-dir", "dirty")
    assert p.returncode == 0, p.stderr[-2000:]
    stamp = json.loads((repo.parent / "dirty" / "provenance.json").read_text())
    prov = json.loads((repo.parent / "dirty" / "result.json").read_text())["provenance"]
    assert prov["git_commit"] == head and prov["git_dirty"] is True
    assert prov["untracked"] == ["methods/my_method.py"] and len(prov["git_diff_sha256"]) == 64
    assert provenance.CODE_FOLDERS == CODE_FOLDERS
    assert stamp["code"] == {k: prov[k] for k in provenance.CODE_KEYS}  # the result carries the start's stamp
    assert stamp["run_id"] == json.loads((repo.parent / "dirty" / "result.json").read_text())["run_id"]
    assert prov["started"] == stamp["started"] and prov["resumed_under"] == []
    # the hash tells two dirty trees apart: another content of the untracked file, an edit of a tracked one
    first = provenance.code_state(repo)["git_diff_sha256"]
    assert first == prov["git_diff_sha256"]
    (repo / "methods" / "my_method.py").write_text("X = 2\n")
    second = provenance.code_state(repo)["git_diff_sha256"]
    (repo / "methods" / "my_method.py").unlink()
    with open(repo / "harness" / "run" / "metrics.py", "a") as f:
        f.write("# an edit\n")
    third = provenance.code_state(repo)
    assert len({first, second, third["git_diff_sha256"]}) == 3 and third["untracked"] == []
    (repo / "notes.txt").write_text("outside the code folders: not the code\n")
    git(repo, "checkout", "-q", "--", "harness/run/metrics.py")
    assert provenance.code_state(repo) == {
        "git_commit": head,
        "git_dirty": False,
        "git_diff_sha256": None,
        "untracked": [],
    }


def test_a_resume_under_other_code_is_recorded_and_warned_not_restamped(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    p = harness(repo, "run.yaml", "rd", script=KILL_AFTER_STEP_1)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    stamp = (repo.parent / "rd" / "provenance.json").read_bytes()
    assert json.loads(stamp)["code"]["git_dirty"] is False
    with open(repo / "harness" / "run" / "metrics.py", "a") as f:  # the code changes while the run is down
        f.write("# changed between the kill and the resume\n")
    now = provenance.code_state(repo)
    p = harness(repo, "train", "run.yaml", "--run-dir", "rd")
    assert p.returncode == 0, p.stderr[-2000:]
    prov = json.loads((repo.parent / "rd" / "result.json").read_text())["provenance"]
    assert (prov["git_commit"], prov["git_dirty"], prov["git_diff_sha256"]) == (head, False, None)  # the start's
    (resume,) = prov["resumed_under"]
    assert {k: resume[k] for k in provenance.CODE_KEYS} == now and resume["git_dirty"] is True
    assert prov["started"] == json.loads(stamp)["started"]
    log = (repo.parent / "rd" / "train.log").read_text()
    assert (
        f"warning: resuming run {json.loads(stamp)['run_id']} under other code than it started with ({head[:7]} at "
        f"its start, {head[:7]}+dirty {now['git_diff_sha256'][:8]} now); recorded in result.json "
        "provenance.resumed_under"
    ) in log
