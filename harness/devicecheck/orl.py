"""Check 5, openrlhf: the harness loss plug-in inside OpenRLHF 0.11.2's real ``ActorPPOTrainer.training_step``
on the device, by running the OpenRLHF test suite's training-step and agreement tests there
(``HARNESS_OPENRLHF_TEST_DEVICE`` puts the trainer, the Actor and the experiences on the device).

What the suite needs beyond the machine: the wheels in ``.device_wheels/`` (``scripts/device_wheels.sh``;
``scripts/device_check.sh`` installs the missing ones), plus stand-ins for three packages that cannot travel or
cannot run there: ``flash_attn`` and ``vllm`` (``harness.backends.openrlhf.rehearsal.stubs``, as in the CPU suite) and
``ray`` (``harness.devicecheck.raystub``: the cp312 ray 2.55.0 wheel is 70.3 MiB, over the 64 MiB a call carries;
the training step never calls Ray). Without openrlhf/deepspeed importable the check is skipped and says which
modules are missing and how large the wheels that would supply them are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ("tests/openrlhf/test_training_step.py", "tests/openrlhf/test_agreement.py")
WHEELS = ROOT / ".device_wheels"
TOO_LARGE = {
    "ray": "ray 2.55.0 (cp312 manylinux2014 wheel: 73,765,215 bytes = 70.3 MiB) exceeds the 64 MiB "
    "a device call may carry; stubbed by harness.devicecheck.raystub"
}

PROBE = r"""
import sys
from harness.backends.openrlhf.rehearsal import stubs as cpu_stubs
from harness.devicecheck import raystub
import torch
torch.compile = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)
stubbed = cpu_stubs.install() + (["ray"] if raystub.install() else [])
print("@@stubbed " + ",".join(stubbed))
for name in ("openrlhf.models.loss", "openrlhf.trainer.ray.ppo_actor"):
    try:
        __import__(name)
        print("@@ok " + name)
    except BaseException as e:
        print("@@missing " + name + " " + type(e).__name__ + ": " + str(e)[:300])
        break
"""


def manifest() -> dict:
    path = WHEELS / "MANIFEST.tsv"
    if not path.exists():
        return {}
    rows = [line.split("\t") for line in path.read_text().splitlines() if "\t" in line]
    return {
        "files": len(rows),
        "total_mib": round(sum(int(b) for _, b in rows) / 2**20, 2),
        "wheels": {f: int(b) for f, b in rows},
    }


def python_cmd() -> list[str]:
    return [sys.executable] + (["-S"] if sys.flags.no_site else [])


def probe() -> dict:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        python_cmd() + ["-c", PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ, PYTHONPATH=path),
        cwd=ROOT,
    )
    out = {"stubbed": [], "imported": [], "missing": None}
    for line in proc.stdout.splitlines():
        if line.startswith("@@stubbed "):
            out["stubbed"] = [s for s in line[len("@@stubbed ") :].split(",") if s]
        elif line.startswith("@@ok "):
            out["imported"].append(line[5:])
        elif line.startswith("@@missing "):
            out["missing"] = line[len("@@missing ") :]
    if out["missing"] is None and len(out["imported"]) < 2:
        out["missing"] = f"probe failed (exit {proc.returncode}): {proc.stderr[-300:]}"
    return out


def run_suite(ctx) -> dict:
    with tempfile.TemporaryDirectory(prefix="harness-devicecheck-orl-") as tmp:
        xml = Path(tmp) / "junit.xml"
        from harness.devicecheck import raystub

        paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        if not raystub.real_ray_importable():  # the dp-rank test's spawned workers import ray too
            paths.insert(1, raystub.write_package(Path(tmp) / "stubs"))
        env = dict(
            os.environ,
            HARNESS_OPENRLHF_TEST_DEVICE=ctx.device,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(paths).rstrip(os.pathsep),
        )
        # addopts cleared: no pytest-timeout needed, and the default "not openrlhf" deselection is gone
        cmd = python_cmd() + [
            "-m",
            "pytest",
            "-q",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            "-p",
            "harness.devicecheck.raystub",
            f"--junitxml={xml}",
            "-rfE",
            *TESTS,
        ]
        ctx.log("running: HARNESS_OPENRLHF_TEST_DEVICE=" + ctx.device + " " + " ".join(cmd[1:]))
        try:
            limit = max(10.0, min(360.0, ctx.left() - 5))
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env, cwd=ROOT, check=False)
            tail, rc = (proc.stdout + proc.stderr)[-4000:], proc.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            tail, rc = f"timed out after {limit:.0f} s (time budget): {out[-2000:]}", 124
        if ctx.log_file is not None:
            ctx.log_file.write(tail + "\n")
        tests = {}
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                where = case.get("file") or case.get("classname", "").replace(".", "/")
                name = f"{Path(where).name}::{case.get('name')}"
                outcome = "passed"
                for tag in ("failure", "error", "skipped"):
                    el = case.find(tag)
                    if el is not None:
                        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                        tests[name] = {"outcome": outcome, "message": (el.get("message") or "")[:500]}
                        break
                else:
                    tests[name] = {"outcome": outcome}
    return {"returncode": rc, "tests": tests, "output_tail": tail[-1500:]}


def check(ctx) -> dict:
    res = {"status": "ok", "tests_run": list(TESTS), "wheels": manifest(), "too_large_to_ship": TOO_LARGE}
    p = probe()
    res["probe"] = p
    if p["missing"]:
        res["status"] = "skipped"
        res["reason"] = (
            f"OpenRLHF path does not import here: {p['missing']}. Ship .device_wheels/ "
            f"(scripts/device_wheels.sh) and run through scripts/device_check.sh"
        )
        return res
    suite = run_suite(ctx)
    res["suite"] = suite
    counts = {}
    for t in suite["tests"].values():
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    res["counts"] = counts
    ctx.log(f"OpenRLHF suite on {ctx.device}: {counts} (stubbed: {', '.join(p['stubbed']) or 'none'})")
    if not suite["tests"]:
        res["status"], res["reason"] = "error", f"pytest ran no test (exit {suite['returncode']})"
    elif counts.get("failed") or counts.get("error"):
        bad = [n for n, t in suite["tests"].items() if t["outcome"] in ("failed", "error")]
        res["status"] = "fail"
        res["reason"] = f"{len(bad)} OpenRLHF test(s) failed on {ctx.device}: {', '.join(bad[:6])}"
    return res
