"""Issue 29 item 12: a full disk and a read-only run directory end in one `error:` line that names the file and
the reason (they were tracebacks; ENOSPC was not named), and the full disk loses nothing: with space again the
same command resumes and finishes. Real file systems: a small tmpfs (needs root to mount; skipped otherwise)."""

import json
import subprocess
from pathlib import Path

import pytest

from harness.cli import main


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({p.stderr.strip() or 'not root'})")

    def remount(opts: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{opts}", str(mnt)], check=True)

    try:
        yield mnt, remount
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _one_error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert "Traceback" not in err and lines and lines[-1].startswith("error: "), err
    return lines[-1]


def test_a_full_disk_is_one_line_naming_the_file_and_the_rerun_finishes(tmpfs, tmp_path, capsys, fx):
    mnt, remount = tmpfs
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3, enabled="false"))
    rd = mnt / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2  # a 0.3M model's checkpoint is ~3.6 MB
    line = _one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and str(rd) in line
    assert not list(rd.rglob("*.tmp"))  # no half-written temp file left to fill the disk
    remount("size=64m")  # space again (a job cleaned up)
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert json.loads((rd / "result.json").read_text())["status"] == "completed"
    assert [json.loads(x)["step"] for x in (rd / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_read_only_run_directory_is_one_line(tmpfs, tmp_path, capsys, fx):
    mnt, remount = tmpfs
    remount("size=64m")
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=1, enabled="false"))
    assert main(["train", str(cfg), "--run-dir", str(mnt / "done")]) == 0
    remount("ro")  # a labmate's runs, or a read-only snapshot
    capsys.readouterr()
    for rd in (mnt / "done", mnt / "new"):
        assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert str(rd) in line and "Read-only file system" in line


def test_eval_refuses_a_non_finite_temperature(tmp_path, capsys):
    for value in ("nan", "inf", "-1"):
        assert (
            main(
                [
                    "eval",
                    "--model",
                    "m",
                    "--suites",
                    "pocket_arith",
                    "--temperature",
                    value,
                    "--out",
                    str(tmp_path / "o"),
                ]
            )
            == 2
        )
        line = _one_error_line(capsys.readouterr().err)
        assert f"--temperature {float(value)}" in line and "finite" in line
    assert not Path(tmp_path / "o").exists()


def test_export_refuses_a_failed_run_and_names_an_unreadable_result(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=1, enabled="false"))
    rd = tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    res = json.loads((rd / "result.json").read_text())
    (rd / "result.json").write_text(json.dumps({**res, "status": "failed"}))
    capsys.readouterr()
    assert main(["export", str(rd), "--out", str(tmp_path / "m")]) == 2
    assert "the run failed" in _one_error_line(capsys.readouterr().err)
    (rd / "result.json").write_bytes(b'{"status": "compl\xff')
    assert main(["export", str(rd), "--out", str(tmp_path / "m")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(rd / "result.json") in line and "UTF-8" in line
    assert not (tmp_path / "m").exists()
