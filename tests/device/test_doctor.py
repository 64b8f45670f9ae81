"""`harness doctor` (issue 34): real checks on this machine, one line each (ok / FAIL / skipped with the reason), a
JSON report, exit 1 on a failure. `--cpu` reports every GPU check as skipped, never as passed; a check is made to
fail by a too-large disk need, a staged input that is missing, a `ray` on PATH from another environment."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.devicecheck.doctor import GPU_CHECKS, nvcc_release, toolkit_matches
from tests.helpers import sweep_targets as testing

ROOT = Path(__file__).resolve().parents[2]
# the OpenRLHF venv of this checkout, or of the checkout whose .venv this one links to (a worktree)
ORL_PYTHON = (
    next(
        (p for p in (ROOT, (ROOT / ".venv").resolve().parent) if (p / ".venv-openrlhf" / "bin" / "python").exists()),
        ROOT,
    )
    / ".venv-openrlhf"
    / "bin"
    / "python"
)
CHECKS = [*GPU_CHECKS, "stack", "ray_cli", "disk", "staged"]


@pytest.fixture()
def pocket_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"name": "doc", "base": testing.tiny_pocket_base(), "seeds": [0, 1]}
    Path("spec.yaml").write_text(yaml.safe_dump(spec))
    return Path("spec.yaml")


def _doctor(capsys, *args) -> tuple[int, list[str]]:
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out.splitlines()


def test_cpu_mode_skips_every_gpu_check_and_runs_the_rest(pocket_spec, capsys):
    rc, lines = _doctor(capsys, "--cpu", "--spec", str(pocket_spec), "--need-gb", "0.001", "--json", "doc.json")
    assert rc == 0
    assert lines[: len(GPU_CHECKS)] == [f"skipped {n:14s}--cpu: GPU checks are not run" for n in GPU_CHECKS]
    free = shutil.disk_usage(Path.cwd()).free / 2**30
    where = Path("runs/doc").absolute()
    assert lines[len(GPU_CHECKS) :] == [
        f"skipped {'stack':14s}no cell of the spec uses a backend that places its own workers",
        f"skipped {'ray_cli':14s}no cell of the spec spans several nodes (single-node jobs start Ray in Python)",
        f"ok      {'disk':14s}{free:.1f} GiB free at {where}, 0.001 GiB needed",
        f"ok      {'staged':14s}spec.yaml: its cells read nothing from the hub",
        "no check failed",
        "report: doc.json",
    ]
    doc = json.loads(Path("doc.json").read_text())
    assert [c["name"] for c in doc["checks"]] == CHECKS and doc["mode"] == "cpu" and doc["spec"] == "spec.yaml"
    assert doc["summary"] == {"ok": ["disk", "staged"], "FAIL": [], "skipped": [*GPU_CHECKS, "stack", "ray_cli"]}


def test_a_too_large_disk_need_fails(pocket_spec, capsys):
    rc, lines = _doctor(capsys, "--cpu", "--spec", str(pocket_spec), "--need-gb", "1e9", "--path", "elsewhere/x")
    assert rc == 1
    (disk,) = [line for line in lines if line.split()[1] == "disk"]
    assert disk.startswith("FAIL    disk          ") and disk.endswith(
        f"free at {Path('elsewhere/x').absolute()}, 1e+09 GiB needed"
    )
    assert lines[-1] == "1 failed: disk"
    assert not Path("elsewhere").exists()  # the doctor writes nothing there


def test_a_staged_input_that_is_missing_fails(pocket_spec, capsys):
    spec = yaml.safe_load(pocket_spec.read_text())
    spec["stage_dir"] = "stage"
    spec["base"]["eval"].update(suites=["math500"], after_training=True)
    pocket_spec.write_text(yaml.safe_dump(spec))
    rc, lines = _doctor(capsys, "--cpu", "--spec", str(pocket_spec))
    assert rc == 1
    (staged,) = [line for line in lines if line.split()[1] == "staged"]
    assert staged == (
        f"FAIL    staged        sweep doc: 1 of its 1 inputs are not staged in {Path('stage').absolute()} (suite "
        "math500: not staged); its jobs run offline and read only the stage: run `harness stage spec.yaml` first"
    )


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_without_cpu_the_gpu_checks_run_and_fail_on_a_machine_without_one(pocket_spec, capsys):
    spec = yaml.safe_load(pocket_spec.read_text())
    spec["resources"] = {"default": {"gpus_per_node": 1}}
    pocket_spec.write_text(yaml.safe_dump(spec))
    rc, lines = _doctor(capsys, "--spec", str(pocket_spec))
    assert rc == 1
    status = {line.split()[1]: line.split()[0] for line in lines[: len(CHECKS)]}
    assert status["gpus"] == status["cuda"] == status["cuda_toolkit"] == status["nccl"] == "FAIL"
    assert status["flash_attn"] == status["vllm"] == "skipped"  # no cell of a pocket spec uses the OpenRLHF stack
    assert lines[0] == "FAIL    gpus          no CUDA GPU visible (torch.cuda.device_count() = 0)"


def test_deepspeeds_toolkit_rule_and_the_real_nvcc():
    """DeepSpeed 0.19.6 (op_builder/builder.py assert_no_cuda_mismatch): equal major.minor, or both in CUDA 11's or
    12's list of compatible minors; CUDA 13 has no list."""
    assert toolkit_matches("13.0", "13.0") and toolkit_matches("12.4", "12.8") and toolkit_matches("11.8", "11.3")
    assert not toolkit_matches("13.0", "12.8") and not toolkit_matches("12.8", "13.0")
    assert not toolkit_matches("13.1", "13.0") and not toolkit_matches("12.7", "12.8")  # no CUDA 12.7 toolkit
    nvcc = shutil.which("nvcc")
    if nvcc:  # this machine has a CUDA toolkit (13.0 when written): the doctor reads the release nvcc prints
        out = subprocess.run([nvcc, "-V"], capture_output=True, text=True).stdout
        assert nvcc_release(nvcc) is not None and f"release {nvcc_release(nvcc)}," in out
    assert nvcc_release("/nonexistent/nvcc") is None


@pytest.mark.skipif(not ORL_PYTHON.exists(), reason="needs .venv-openrlhf (make setup-openrlhf): ray installed")
def test_ray_on_path_must_be_this_environments(tmp_path):
    """With the OpenRLHF stack installed: its own `ray` on PATH passes; another environment's `ray` first on PATH
    fails naming both; none on PATH fails naming where it is."""
    other = tmp_path / "other-env" / "bin"
    other.mkdir(parents=True)
    (other / "ray").write_text("#!/usr/bin/python3\nprint('not this ray')\n")
    (other / "ray").chmod(0o755)
    own = ORL_PYTHON.parent

    def ray_line(path: str) -> str:
        env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [str(ORL_PYTHON), "-m", "harness", "doctor", "--cpu"], env=env, capture_output=True, text=True
        ).stdout
        (line,) = [x for x in out.splitlines() if x.split()[1:2] == ["ray_cli"]]
        return line

    base = "/usr/bin:/bin"
    assert ray_line(f"{own}:{base}") == f"ok      ray_cli       {own / 'ray'}"
    assert ray_line(f"{other}:{own}:{base}") == (
        f"FAIL    ray_cli       `ray` on PATH is {other / 'ray'}, another environment's (/usr/bin/python3); put "
        f"{own} first on PATH in the job"
    )
    assert ray_line(base).startswith(f"FAIL    ray_cli       `ray` is not on PATH; put {own} on PATH in the job")


def test_bad_arguments_are_one_line(capsys):
    assert main(["doctor", "--cpu", "--need-gb", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --need-gb -1.0: must be >= 0"
    assert main(["doctor", "--partitions", "gpu"]) == 2
    assert capsys.readouterr().err.strip() == "error: --partitions: only with --slurm"
    assert sys.executable  # the doctor runs in this interpreter's environment
