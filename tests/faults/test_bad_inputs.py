"""Issue 29 item 6 and the one-line promise: every subcommand meets unreadable, non-UTF-8 and malformed run files,
specs and configs. A reader either goes on and names the file it could not read, or stops with one `error:` line
that names it; no traceback, and no other run's results lost."""

import os
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from tests.helpers.sweep_targets import tiny_pocket_base

KINDS = ("unreadable", "non-utf8", "malformed")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A finished two-cell sweep (real tiny pocket runs, debug executor), its spec, a run config and a CSV."""
    root = tmp_path_factory.mktemp("world")
    base = tiny_pocket_base(steps=2)
    (root / "base.yaml").write_text(yaml.safe_dump(base))
    (root / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": [0, 1]}))
    (root / "run.yaml").write_text(yaml.safe_dump(base))
    (root / "log.csv").write_text("step,entropy,score\n1,1.0,0.1\n2,0.8,0.3\n3,0.6,0.4\n")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main(["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]) == 0
    finally:
        os.chdir(cwd)
    return root


def damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    if kind == "non-utf8":
        path.write_bytes(data[: len(data) // 2] + b"\xff\xfe" + data[len(data) // 2 :])
    elif kind == "malformed":
        path.write_bytes(data[: max(1, len(data) // 2)])
    elif os.geteuid() != 0:  # unreadable: no read permission
        os.chmod(path, 0)
    else:  # root reads anything: a directory where the file should be
        path.unlink()
        path.mkdir()


# (file to damage, command); {cell} = the first cell's directory. Each command reads that file.
CASES = [
    ("s.yaml", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("base.yaml", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("s.yaml", ["sweep", "s.yaml", "--dry-run"]),
    ("s.yaml", ["status", "s.yaml", "--runs-dir", "runs"]),
    ("run.yaml", ["train", "run.yaml", "--dry-run"]),
    ("runs/sweep.yaml", ["status", "runs"]),
    ("runs/sweep.yaml", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("{cell}/cell.json", ["status", "runs"]),
    ("{cell}/cell.json", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("{cell}/jobs.jsonl", ["status", "runs"]),
    ("{cell}/jobs.jsonl", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("{cell}/result.json", ["status", "runs"]),
    ("{cell}/result.json", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("{cell}/result.json", ["table", "runs"]),
    ("{cell}/result.json", ["report", "runs", "--out", "report", "--formats", "png"]),
    ("{cell}/result.json", ["plot", "runs", "--out", "plots", "--formats", "png"]),
    ("{cell}/result.json", ["mechanism", "runs", "--out", "mech"]),
    ("{cell}/result.json", ["fit", "runs", "--score-key", "reward/mean"]),
    ("{cell}/result.json", ["export", "{cell}", "--out", "exported"]),
    ("{cell}/result.json", ["train", "{cell}/config.yaml", "--run-dir", "{cell}"]),
    ("{cell}/metrics.jsonl", ["table", "runs"]),
    ("{cell}/metrics.jsonl", ["plot", "runs", "--out", "plots", "--formats", "png"]),
    ("{cell}/metrics.jsonl", ["fit", "runs", "--score-key", "reward/mean"]),
    ("{cell}/config.yaml", ["table", "runs"]),
    ("{cell}/config.yaml", ["export", "{cell}", "--out", "exported"]),
    ("{cell}/config.yaml", ["train", "run.yaml", "--run-dir", "{cell}"]),
    ("{cell}/config.yaml", ["sweep", "s.yaml", "--runs-dir", "runs", "--executor", "debug", "--no-progress"]),
    ("{cell}/checkpoints/latest.pt", ["export", "{cell}", "--out", "exported"]),
    ("log.csv", ["fit", "--csv", "log.csv", "--entropy-col", "entropy", "--score-col", "score"]),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target, argv", CASES, ids=[f"{c[1][0]}:{c[0].replace('{cell}/', '')}" for c in CASES])
def test_every_command_names_the_file_it_could_not_read(world, tmp_path, capsys, monkeypatch, kind, target, argv):
    root = tmp_path / "w"
    shutil.copytree(world, root, symlinks=True)
    cell = sorted(p.parent.relative_to(root) for p in (root / "runs").glob("*/cell.json"))[0]
    target = target.format(cell=cell)
    if not (root / target).is_file():
        pytest.skip(f"{target} is not written by this run")
    damage(root / target, kind)
    monkeypatch.chdir(root)
    rc = main([a.format(cell=cell) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "codec can't decode" not in err, err
    name = Path(target).name
    if rc != 0:  # one error line; the file is named in it or in a warning before it
        lines = [x for x in err.splitlines() if x.strip()]
        assert lines and lines[-1].startswith("error: "), err
        assert all(x.startswith(("error: ", "warning: ", "note: ")) for x in lines), err
        assert name in err, f"{target} ({kind}) is not named: {err}"
    else:
        assert name in out + err, f"{target} ({kind}) was read past silently:\n{out}\n{err}"
