"""harness data: prepare, sources and the bad-input exits."""

import json

import pytest

pytest.importorskip("math_verify")
pytest.importorskip("pyarrow")

from harness.cli import main  # noqa: E402


def test_prepare_from_the_sample(tmp_path, capsys):
    assert main(["data", "prepare", "eurus-2-rl-math", "--source", "sample", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "eurus-2-rl-math: kept 17 of 27 rows; dropped: duplicate 2, empty_answer 1, not_math 6, unparseable 1" in out
    manifest = json.loads((tmp_path / "eurus-2-rl-math.manifest.json").read_text())
    assert manifest["counts"]["kept"] == 17 == len((tmp_path / "eurus-2-rl-math.jsonl").read_text().splitlines())


def test_sources_lists_the_pinned_revisions(capsys):
    assert main(["data", "sources"]) == 0
    out = capsys.readouterr().out
    assert (
        "dapo-math-17k    BytedTsinghua-SIA/DAPO-Math-17k (split train) @ 65877096c24ffa7abc4e4fa5edb95cf3413a5674"
        in out
    )
    assert "eurus-2-rl-math  PRIME-RL/Eurus-2-RL-Data (split train) @ 5cbc5bc54c9c8417afd3539fb267422c33b525e6" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["data", "prepare", "dapo-math", "--source", "sample", "--out", "{tmp}"], "Did you mean 'dapo-math-17k'"),
        (["data", "prepare", "dapo-math-17k", "--source", "{tmp}/nope.parquet", "--out", "{tmp}"], "no such file"),
        (["data", "prepare", "dapo-math-17k", "--source", "sample", "--out", "{tmp}", "--workers", "0"], "--workers"),
        (["data", "check", "{tmp}/nope.jsonl"], "training file not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not list(tmp_path.glob("*.jsonl"))
