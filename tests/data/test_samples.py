"""The shipped samples: exactly the rows sample_rows builds, in each source's hub schema, shipped in the wheel."""

import fnmatch
import json
from pathlib import Path

import pytest
import tomllib

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from harness.data import RAW_DAPO_PROMPTS, SAMPLES_DIR, sample_path  # noqa: E402
from harness.data import sample_rows as S  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HUB_COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


@pytest.mark.parametrize(
    "name, rows, schema",
    [("dapo-math-17k", S.dapo_rows, S.dapo_schema), ("eurus-2-rl-math", S.eurus_rows, S.eurus_schema)],
)
def test_the_parquet_samples_hold_the_built_rows_in_the_hub_schema(name, rows, schema):
    table = pq.read_table(sample_path(name))
    assert table.column_names == HUB_COLUMNS
    assert table.schema.equals(schema())
    assert table.to_pylist() == rows()


def test_the_sample_rows_are_shaped_like_the_hub_rows():
    dapo = S.dapo_rows()[0]
    assert dapo["prompt"][0]["role"] == "user" and dapo["ability"] == "MATH" and dapo["data_source"] == "math_dapo"
    assert list(dapo["reward_model"]) == ["ground_truth", "style"] and list(dapo["extra_info"]) == ["index"]
    eurus = S.eurus_rows()
    assert {r["ability"] for r in eurus} == {"math", "coding"}
    assert all([m["role"] for m in r["prompt"]] == ["system", "user"] for r in eurus)
    coding = [r for r in eurus if r["ability"] == "coding"]
    assert len(coding) == 6 and all(
        set(json.loads(r["reward_model"]["ground_truth"])) == {"inputs", "outputs"} for r in coding
    )


def test_the_raw_dapo_prompt_file():
    rows = [json.loads(line) for line in RAW_DAPO_PROMPTS.read_text().splitlines()]
    assert rows == S.raw_dapo_prompts() and len(rows) == 12


def test_the_samples_are_package_data():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "harness.data.samples" in cfg["packages"]  # a data package of its own (setuptools warns otherwise)
    globs = cfg["package-data"]["harness.data.samples"]
    files = sorted(p.relative_to(SAMPLES_DIR).as_posix() for p in SAMPLES_DIR.iterdir())
    assert len(files) == 3
    assert all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)
