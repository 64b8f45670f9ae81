"""Issue 29 items 4, 10, 12 for sweeps: duplicate keys in specs and their base files, a malformed base YAML, a
second spec pointed at another sweep's runs directory, a truncated result.json in status, and launch commands a
shell runs (a runs directory named like an injection, run outside the venv, from another directory)."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import yaml

from harness.cli import main
from tests.helpers.sweep_targets import tiny_pocket_base


def _one_error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert "Traceback" not in err and lines and lines[-1].startswith("error: "), err
    return lines[-1]


def test_duplicate_top_level_keys_in_a_spec_are_refused_naming_key_and_lines(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\n"
        f"base: {json.dumps(tiny_pocket_base())}\n"
        "grid:\n  method.name: [grpo, kl_cov]\n"
        "seeds: [0]\n"
        "grid:\n  train.lr: [0.001]\n"  # the second grid: dropped the method cells
    )
    assert main(["sweep", str(spec), "--dry-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(spec) in line and "'grid'" in line and "line 6" in line and "line 3" in line


def test_a_base_file_with_duplicate_keys_or_malformed_yaml_is_one_line(tmp_path, capsys):
    base = tmp_path / "base.yaml"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": [0]}))
    base.write_text(yaml.safe_dump(tiny_pocket_base(), sort_keys=False) + "seed: 3\nseed: 4\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(base) in line and "'seed'" in line
    base.write_text("train: {steps: 2\n")
    assert main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(base) in line and "YAML" in line


def _run_sweep(tmp_path, name, runs, seeds=(0,)):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({"name": name, "base": tiny_pocket_base(steps=1), "seeds": list(seeds)}))
    return main(["sweep", str(spec), "--runs-dir", str(runs), "--executor", "debug", "--no-progress"])


def test_a_second_spec_does_not_take_over_a_sweeps_runs_directory(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert _run_sweep(tmp_path, "a", runs) == 0
    before = sorted(str(p.relative_to(runs)) for p in runs.rglob("*"))
    sweep_copy = (runs / "sweep.yaml").read_text()
    capsys.readouterr()
    assert _run_sweep(tmp_path, "b", runs, seeds=(5,)) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "sweep 'a'" in line and str(runs) in line and "--runs-dir" in line
    assert sorted(str(p.relative_to(runs)) for p in runs.rglob("*")) == before
    assert (runs / "sweep.yaml").read_text() == sweep_copy
    assert _run_sweep(tmp_path, "a", runs, seeds=(0, 1)) == 0  # the same sweep, edited, still submits


def test_status_names_a_truncated_result_json(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert _run_sweep(tmp_path, "a", runs) == 0
    (cell,) = [p.parent for p in runs.glob("*/cell.json")]
    data = (cell / "result.json").read_bytes()
    (cell / "result.json").write_bytes(data[: len(data) // 2])
    capsys.readouterr()
    assert main(["status", str(runs)]) == 0
    out = capsys.readouterr().out
    (row,) = [x for x in out.splitlines() if cell.name.rsplit("__", 1)[1] in x]
    assert row.startswith("failed") and "result.json unreadable" in row and "no result.json" not in row


def _injected(proc) -> bool:
    """The injected `echo INJECTED` ran (the directory's name, which holds the word, may be printed)."""
    return any(line.strip() == "INJECTED" for line in (proc.stdout + proc.stderr).splitlines())


def test_launch_sh_and_the_dry_run_command_are_quoted_and_carry_their_interpreter(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = Path("x;echo INJECTED;exit 0;")  # relative, as `--runs-dir` is usually given
    assert _run_sweep(tmp_path, "inj", runs) == 0
    (cell,) = [tmp_path / p.parent for p in runs.glob("*/cell.json")]
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}  # outside the venv: no `python` of ours
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run(
        ["bash", str(cell / "launch.sh")], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert not _injected(p)
    assert p.returncode == 0, p.stderr  # it trains (here: finds the finished run) from any directory
    assert "already completed" in p.stderr
    capsys.readouterr()
    spec = tmp_path / "inj.yaml"
    assert main(["sweep", str(spec), "--runs-dir", str(runs), "--dry-run"]) == 0
    (cmd,) = [x.strip()[2:] for x in capsys.readouterr().out.splitlines() if x.strip().startswith("$ ")]
    p = subprocess.run(["bash", "-c", cmd], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert not _injected(p) and p.returncode == 0, p.stderr
    assert Path(shlex.split(cmd)[0]).is_absolute()
