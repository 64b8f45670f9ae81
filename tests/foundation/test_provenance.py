"""harness.provenance: git state of real repositories, package versions, data hashes, hardware, cost."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from harness import provenance

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2 test vector "abc"


def git(*args, cwd):
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    git("init", "-q", cwd=d)
    (d / "code.py").write_text("x = 1\n")
    git("add", "code.py", cwd=d)
    git("commit", "-q", "-m", "first", cwd=d)
    return d


def test_git_state_clean_dirty_untracked(repo):
    head = git("rev-parse", "HEAD", cwd=repo).strip()
    assert provenance.git_state(repo) == (head, False)
    (repo / "notes.txt").write_text("untracked output\n")  # untracked files do not make the tree dirty
    assert provenance.git_state(repo) == (head, False)
    (repo / "code.py").write_text("x = 2\n")
    assert provenance.git_state(repo) == (head, True)
    git("commit", "-q", "-am", "second", cwd=repo)
    new = git("rev-parse", "HEAD", cwd=repo).strip()
    assert new != head and provenance.git_state(repo) == (new, False)


def test_git_state_outside_a_checkout_is_none(repo, tmp_path, monkeypatch):
    sub = repo / "venv" / "site-packages"  # an installed package inside some other repository
    sub.mkdir(parents=True)
    assert provenance.git_state(sub) == (None, None)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert provenance.git_state(plain) == (None, None)
    empty = tmp_path / "empty"
    empty.mkdir()
    git("init", "-q", cwd=empty)  # a repository without commits
    assert provenance.git_state(empty) == (None, None)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git binary at all
    assert provenance.git_state(repo) == (None, None)


def test_collect_shape_packages_and_time():
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    p = provenance.collect()
    assert set(p) == {
        "git_commit",
        "git_dirty",
        "git_diff_sha256",
        "untracked",
        "packages",
        "datasets",
        "hardware",
        "created",
    }
    assert set(p["packages"]) == {"torch", "transformers", "vllm", "openrlhf", "lm-eval", "math-verify", "harness"}
    for key, dist in {
        "torch": "torch",
        "lm-eval": "lm_eval",
        "harness": "entropy-harness",
        "vllm": "vllm",
        "openrlhf": "openrlhf",
    }.items():
        try:
            want = metadata.version(dist)
        except metadata.PackageNotFoundError:
            want = None
        assert p["packages"][key] == want
    created = dt.datetime.strptime(p["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert before <= created <= dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    assert p["datasets"] == []
    json.dumps(p)  # plain JSON
    root = provenance.source_root()
    if (root / ".git").exists():  # running from a checkout: its HEAD
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        assert p["git_commit"] == head and isinstance(p["git_dirty"], bool)


def test_collect_imports_no_package_and_leaves_cuda_alone():
    code = (
        "import sys, json\n"
        "from harness import provenance\n"
        "before = set(sys.modules)\n"
        "provenance.collect()\n"
        "import torch\n"
        "new = sorted(m.split('.')[0] for m in set(sys.modules) - before)\n"
        "print(json.dumps({'new': sorted(set(new)), 'cuda': torch.cuda.is_initialized()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    heavy = {"transformers", "vllm", "lm_eval", "math_verify", "openrlhf", "datasets"}
    assert not heavy & set(res["new"]), res["new"]
    assert res["cuda"] is False


def test_dataset_entry_file_and_rows(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"abc")
    assert provenance.dataset_entry("d", f, revision="r1") == {
        "name": "d",
        "source": str(f),
        "revision": "r1",
        "sha256": ABC_SHA256,
        "rows": None,
    }
    rows = [{"b": 1, "a": "é"}, {"a": None}]
    canonical = '{"a":"é","b":1}\n{"a":null}\n'.encode()
    e = provenance.dataset_entry("aime24", rows, source="hub:x")
    assert e == {
        "name": "aime24",
        "source": "hub:x",
        "revision": None,
        "sha256": hashlib.sha256(canonical).hexdigest(),
        "rows": 2,
    }
    assert provenance.dataset_entry("aime24", [{"a": "é", "b": 1}, {"a": None}])["sha256"] == e["sha256"]
    assert provenance.dataset_entry("aime24", [{"b": 2, "a": "é"}, {"a": None}])["sha256"] != e["sha256"]
    assert provenance.dataset_entry("aime24", iter(rows))["sha256"] == e["sha256"]  # any iterable, read once


def test_dataset_entry_and_collect_refuse_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        provenance.dataset_entry("d", tmp_path / "missing.jsonl")
    with pytest.raises(TypeError, match="mappings"):
        provenance.dataset_entry("d", [{"a": 1}, "text"])
    with pytest.raises(ValueError, match="non-empty string"):
        provenance.dataset_entry("", [])
    with pytest.raises(ValueError, match="dataset_entry"):
        provenance.collect(datasets=[{"name": "x"}])
    entry = provenance.dataset_entry("d", [{"a": 1}])
    assert provenance.collect(datasets=[entry])["datasets"] == [entry]


def test_hardware_reads_the_driver_files(tmp_path, monkeypatch):
    for i, model in enumerate(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]):
        d = tmp_path / f"0000:0{i}:00.0"
        d.mkdir()
        (d / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 42\nGPU UUID: \t GPU-{i}\n")
    monkeypatch.setattr(provenance, "_PROC_GPUS", tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    hw = provenance.hardware()
    assert hw["gpu"] == "NVIDIA H100 80GB HBM3 + NVIDIA A100-SXM4-40GB" and hw["gpu_count"] == 3
    assert hw["cuda_visible_devices"] == "1,2"
    assert hw["cpu_count"] == os.cpu_count() and hw["cpu"]


def test_hardware_without_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_PROC_GPUS", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no nvidia-smi either
    hw = provenance.hardware()
    assert hw["gpu"] is None and hw["gpu_count"] == 0
    assert Path("/proc/cpuinfo").exists() is False or hw["cpu"]
