"""harness data prepare on the shipped samples: counts worked out from how the samples are built, the exact
rows, the manifest, the hub branch up to datasets.load_dataset, and nothing written on refusal."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("math_verify")
pytest.importorskip("pyarrow")

from harness.data import check_training_file, prepare, sample_path  # noqa: E402
from harness.data import pipeline as prepare_module  # noqa: E402
from harness.data import sample_rows as S  # noqa: E402
from harness.data.sources import DAPO_PREFIX, DAPO_SUFFIX, EURUS_SUFFIX, hub_rows, read_file_rows  # noqa: E402

PAPER = "\n\nPresent the answer in LaTeX format: \\boxed{Your answer}."
DAPO_REV = "65877096c24ffa7abc4e4fa5edb95cf3413a5674"


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dapo_sample(tmp_path):
    m = prepare("dapo-math-17k", tmp_path, source="sample")
    # 30 rows = 16 problems + 10 repeats + the cube problem with answers 12 and 8 + an empty and an unboxable answer
    assert m["counts"]["read"] == 30
    assert m["counts"]["kept"] == 16
    assert m["counts"]["dropped"] == {"conflicting_answer": 2, "duplicate": 10, "empty_answer": 1, "unboxable": 1}
    assert m["counts"]["instruction_removed"] == {"dapo_prefix": 30, "dapo_suffix": 30}
    rows = lines(tmp_path / "dapo-math-17k.jsonl")
    assert [r["prompt"] for r in rows] == [p + PAPER for p, _ in S.DAPO_PROBLEMS]
    assert [r["answer"] for r in rows] == [a for _, a in S.DAPO_PROBLEMS]
    assert rows[0]["prompt"] == (
        "Find the remainder when $2^{10}$ is divided by $7$.\n\n"
        "Present the answer in LaTeX format: \\boxed{Your answer}."
    )
    assert {r["data_source"] for r in rows} == {"math_dapo"}
    # the manifest names what was read, written and changed
    assert m["source"]["kind"] == "sample" and m["source"]["hub_id"] == "BytedTsinghua-SIA/DAPO-Math-17k"
    assert m["input"] == {"sha256": sha(sample_path("dapo-math-17k")), "hashed": "file bytes"}
    assert m["output"]["sha256"] == sha(tmp_path / "dapo-math-17k.jsonl") and m["output"]["rows"] == 16
    assert m["template"]["text"] == "{problem}" + PAPER
    assert m["template"]["removed_from_source"] == {"dapo_prefix": DAPO_PREFIX, "dapo_suffix": DAPO_SUFFIX}
    assert json.loads((tmp_path / "dapo-math-17k.manifest.json").read_text()) == m


def test_eurus_sample(tmp_path):
    m = prepare("eurus-2-rl-math", tmp_path, source="sample")
    # 27 rows = 16 math problems + 2 repeats + \sqrt{} + a null answer + a row without the suffix + 6 coding rows
    assert (m["counts"]["read"], m["counts"]["kept"]) == (27, 17)
    assert m["counts"]["dropped"] == {"duplicate": 2, "empty_answer": 1, "not_math": 6, "unparseable": 1}
    assert m["counts"]["instruction_removed"] == {"eurus_suffix": 20, "system_prompt": 21}
    rows = lines(tmp_path / "eurus-2-rl-math.jsonl")
    expected = [(p + PAPER, a) for _, p, _, a in S.EURUS_MATH] + [("Compute $2^5$." + PAPER, "32")]
    assert [(r["prompt"], r["answer"]) for r in rows] == expected
    assert not any("[ASSESS]" in r["prompt"] or "LaTex format" in r["prompt"] for r in rows)
    assert m["template"]["removed_from_source"]["eurus_suffix"] == EURUS_SUFFIX


def test_prepared_files_pass_the_check_and_the_pocket_task_grades_them(tmp_path):
    from harness.backends.pocket.tasks import make_task

    prepare("dapo-math-17k", tmp_path, source="sample")
    path = tmp_path / "dapo-math-17k.jsonl"
    assert check_training_file(path, sample=0).gold_checked == 16
    task = make_task(str(path), test_size=2)
    first = next(p for p in task.all_problems() if p["answer"] == "2")
    assert task.verify("so 2^10 = 1024 = 7*146 + 2, \\boxed{2}", first) == 1.0
    assert task.verify("\\boxed{3}", first) == 0.0


def test_a_jsonl_file_in_the_hub_schema_prepares_to_the_same_rows(tmp_path):
    src = tmp_path / "dapo.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in S.dapo_rows()))
    a = prepare("dapo-math-17k", tmp_path / "a", source=str(src), revision="my-download")
    b = prepare("dapo-math-17k", tmp_path / "b", source="sample")
    assert a["output"]["sha256"] == b["output"]["sha256"]
    assert a["source"]["kind"] == "file" and a["source"]["revision"] == "my-download"
    assert a["input"]["sha256"] == sha(src)


def test_the_hub_branch_loads_the_pinned_revision_through_datasets(tmp_path, monkeypatch, offline_datasets):
    """datasets.load_dataset runs for real, pointed at the shipped parquet instead of the network."""
    calls = []
    S_NAME = "dapo-math-17k"

    def local_hub(hub_id, *, revision, split):
        calls.append((hub_id, revision, split))
        return hub_rows(
            "parquet", revision=None, split=split, data_files=str(sample_path(S_NAME)), cache_dir=str(tmp_path / "c")
        )

    monkeypatch.setattr(prepare_module, "hub_rows", local_hub)
    m = prepare(S_NAME, tmp_path / "hub")
    assert calls == [("BytedTsinghua-SIA/DAPO-Math-17k", DAPO_REV, "train")]
    assert m["source"]["kind"] == "hub" and m["source"]["revision"] == DAPO_REV
    assert m["input"]["hashed"] == "rows as canonical JSON"
    assert m["output"]["sha256"] == prepare(S_NAME, tmp_path / "s", source="sample")["output"]["sha256"]
    prepare(S_NAME, tmp_path / "hub2", revision="abc123")
    assert calls[-1][1] == "abc123"


def test_datasets_reads_the_samples_as_the_file_reader_does(tmp_path, offline_datasets):
    for name in ("dapo-math-17k", "eurus-2-rl-math"):
        rows = hub_rows(
            "parquet", revision=None, split="train", data_files=str(sample_path(name)), cache_dir=str(tmp_path)
        )
        assert rows == read_file_rows(sample_path(name))


@pytest.mark.parametrize("revision", [None, "abc"])
def test_offline_hub_load_names_the_revision_and_writes_nothing(tmp_path, revision):
    pytest.importorskip("datasets")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    cmd = [sys.executable, "-m", "harness", "data", "prepare", "dapo-math-17k", "--out", str(tmp_path / "out")]
    out = subprocess.run(cmd + (["--revision", revision] if revision else []), env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert (
        f"could not load BytedTsinghua-SIA/DAPO-Math-17k at revision {revision or DAPO_REV} split 'train'" in out.stderr
    )
    assert not (tmp_path / "out").exists()


def test_refusals_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="does not ask for the answer"):
        prepare("dapo-math-17k", tmp_path / "t", source="sample", template="{problem}")
    assert not (tmp_path / "t").exists()
    with pytest.raises(ValueError, match="unknown data source 'dapo'"):
        prepare("dapo", tmp_path / "t", source="sample")
    # every answer ungradable: nothing left
    import pyarrow as pa
    import pyarrow.parquet as pq

    # 19 distinct problems (16 + cube + 7x8 + 6x9); the 11 repeats (the cube's second answer is '' too) are duplicates
    bad = [dict(r, reward_model={"ground_truth": "", "style": "x"}) for r in S.dapo_rows()]
    pq.write_table(pa.Table.from_pylist(bad, schema=S.dapo_schema()), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"no row left of 30 \(duplicate 11, empty_answer 19\); nothing written"):
        prepare("dapo-math-17k", tmp_path / "t", source=str(tmp_path / "bad.parquet"))
    assert not (tmp_path / "t").exists()


def test_an_existing_file_with_other_content_needs_force(tmp_path):
    first = prepare("dapo-math-17k", tmp_path, source="sample")
    path = tmp_path / "dapo-math-17k.jsonl"
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    assert prepare("dapo-math-17k", tmp_path, source="sample") == first  # up to date: nothing rewritten
    # the same rows from another source: the file stays, the manifest tells the new story
    src = tmp_path / "dapo.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in S.dapo_rows()))
    again = prepare("dapo-math-17k", tmp_path, source=str(src))
    assert path.stat().st_mtime_ns == mtime and again["source"]["kind"] == "file"
    assert json.loads((tmp_path / "dapo-math-17k.manifest.json").read_text()) == again
    with pytest.raises(ValueError, match="exists with other content; pass --force"):
        prepare("dapo-math-17k", tmp_path, source="sample", template="qwen_boxed")
    assert path.read_bytes() == before
    m = prepare("dapo-math-17k", tmp_path, source="sample", template="qwen_boxed", force=True)
    assert lines(path)[0]["prompt"].endswith(
        "\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    assert m["template"]["name"] == "qwen_boxed"
