"""scripts/device_check.sh --cpu on a stand-in for the bare GPU machine (tests/device/bare_machine.py): every
check runs at small sizes, the report has its schema, and its numbers are finite and consistent. With the CPU
standing in for the device, device-vs-CPU comparisons are CPU-vs-CPU and must agree exactly.

Every registered method must pass every check, so a method added later that the check cannot run fails here (issue
29, item 11: high_entropy_tokens, whose entropy gets no gradient, crashed the loss check). A method that raises is
still reported with its error (exit 1) without stopping the others
(test_one_methods_crash_is_reported_and_the_others_still_run)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.devicecheck.core import CHECKS, STATUSES, compare

sys.path.insert(0, str(Path(__file__).parent))
import bare_machine

ROOT = Path(__file__).resolve().parents[2]
PAPER = ("grpo", "rloo", "prime", "entropy_bonus", "clip_higher", "clip_cov", "kl_cov")


def _run(args, tmp_path, timeout=420):  # a safety net: the --cpu check trains every method (20) for one step
    env = dict(
        os.environ,
        PYTHON=f"{sys.executable} -S",
        HARNESS_DEVICE_WHEELS="",
        HARNESS_DEVICE_SITE=str(tmp_path / "site"),
        PYTHONPATH=str(bare_machine.build(tmp_path / "bare_site")),
    )
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
        check=False,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("device_check")
    proc = _run(["--cpu", "--out", str(tmp / "out")], tmp)
    rep = json.loads((tmp / "out" / "device_check.json").read_text())
    failed = rep["summary"]["fail"] + rep["summary"]["error"]
    assert proc.returncode == (1 if failed else 0), proc.stderr[-3000:]
    rep["_log"] = (tmp / "out" / "device_check.log").read_text()
    return rep


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_report_schema_and_statuses(report):
    assert report["schema_version"] == 1 and report["mode"] == "cpu" and report["device"] == "cpu"
    assert list(report["checks"]) == list(CHECKS)
    for name, res in report["checks"].items():
        assert res["status"] in STATUSES and _finite(res["wall_s"]), name
        assert f"== {name}" in report["_log"]
    assert report["summary"]["error"] == [] and report["summary"]["fail"] == [], report["summary"]
    assert report["summary"]["skipped"] == ["openrlhf"]  # not installed on the stand-in


def test_environment_sees_the_bare_machine(report):
    env = report["checks"]["environment"]
    assert {"submitit", "math_verify", "openrlhf", "deepspeed", "ray"} <= set(env["missing_packages"])
    assert env["packages"]["torch" if "torch" in env["packages"] else "yaml"]["ok"]
    for core in ("harness", "harness.run.runner", "harness.backends.pocket.trainer"):
        assert env["harness_modules"][core]["ok"], core
    # the CLI and the sweep layer load on the bare machine: submitit and scipy are imported only when used
    assert env["cli"]["ok"] and env["harness_modules"]["harness.commands.sweep"]["ok"], env["cli"]
    assert env["harness_modules"]["harness.sweeps.submit"]["ok"] == ("submitit" not in env["missing_packages"])
    assert env["torch"] and env["transformers"] and env["cuda_available"] in (True, False)


@pytest.mark.parametrize("name", harness.list_methods())
def test_losses_every_registered_method_agrees_exactly_on_one_device(report, name):
    r = report["checks"]["losses"]["methods"][name]
    assert "error" not in r, r.get("error")
    assert r["ok"] and _finite(r["loss_cpu"]), name
    assert r["loss"]["max_abs"] == 0.0 and r["grad"]["max_abs"] == 0.0, name  # same device: bit-identical
    assert r["metrics_differing"] == {}, name
    if harness.get_method(name).needs_entropy:
        assert r["grad_entropy"]["ok"] and r["grad_entropy"]["max_abs"] == 0.0, name


def test_losses_every_method_agrees_exactly_on_one_device(report):
    res = report["checks"]["losses"]
    assert set(res["methods"]) == set(harness.list_methods()) and set(PAPER) <= set(res["methods"])
    for name, r in res["methods"].items():
        assert r["ok"] and _finite(r["loss_cpu"]), name
        assert r["loss"]["max_abs"] == 0.0 and r["grad"]["max_abs"] == 0.0, name  # same device: bit-identical
        assert r["metrics_differing"] == {}, name
    gen = res["clip_cov_device_generator"]
    assert gen["supported"] and gen["count_equal"] and gen["same_tokens_as_cpu_generator"]  # a CPU one here
    assert gen["selected_count_cpu"] >= 1
    assert len(res["timing"]) == 2 and res["timing"][0]["positions"] < res["timing"][1]["positions"]
    for row in res["timing"]:
        assert row["tokens"] == row["positions"]  # timing inputs are all valid tokens
        assert row["methods"]["grpo"]["ratio_to_grpo"] == 1.0 and set(PAPER) <= set(row["methods"])
        assert all(_finite(v["seconds"]) and v["seconds"] > 0 for v in row["methods"].values())


def test_one_methods_crash_is_reported_and_the_others_still_run(tmp_path):
    from harness.devicecheck import losses
    from harness.devicecheck.core import Context

    @harness.register_method("toy_crashing")
    class ToyCrashing(harness.Method):
        """Raises in its loss."""

        def per_token_loss(self, *_, **__):
            raise RuntimeError("boom")

    try:
        res = losses.check(Context(device="cpu", small=True, out=tmp_path, budget_s=0.0))  # no time left: no timing
    finally:
        harness.METHODS.unregister("toy_crashing")
    assert res["status"] == "fail" and "raised: toy_crashing" in res["reason"]
    assert res["methods"]["toy_crashing"] == {"ok": False, "error": "RuntimeError: boom"}
    assert all(r["ok"] for n, r in res["methods"].items() if n != "toy_crashing")
    assert "time budget" in res["timing_cut"]


def test_entropy_ratios_and_values(report):
    res = report["checks"]["entropy"]
    assert [r["dtype"] for r in res["results"]] == ["bfloat16", "float32"]
    assert res["memory_measured"] is False
    for r in res["results"]:
        c = r["routes"]["chunked"]
        assert c["value_ok"] and c["max_abs_err_vs_fp32"] <= res["value_atol_nats"][r["dtype"]]
        assert c["fwd_peak_extra_mib"] is None  # not measured on the CPU
        q = r["ratios_chunked_to_logsumexp"]
        assert _finite(q["fwd_time"]) and _finite(q["fwd_bwd_time"]) and q["fwd_peak_memory"] is None
        assert q["fwd_time"] == pytest.approx(c["fwd_s"] / r["routes"]["logsumexp"]["fwd_s"], rel=1e-2)


def test_pocket_runs_replay_the_first_step_exactly(report):
    res = report["checks"]["pocket"]
    assert set(res["methods"]) == set(harness.list_methods()) and set(PAPER) <= set(res["methods"])
    assert res["config"]["train"]["device"] == "cpu" and res["config"]["train"]["steps"] == 2
    for name, r in res["methods"].items():
        assert r["ok"], (name, r)
        for side in ("cpu", "device"):
            assert r[side]["status"] == "completed" and r[side]["steps"] == 2 and r[side]["nonfinite"] == []
            assert _finite(r[side]["s_per_step"]) and r[side]["s_per_step"] > 0
        assert r["first_step"]["max_rel"] == 0.0 and r["first_step"]["keys_compared"] >= 15, name
    assert _finite(res["device_to_cpu_time"])


def test_openrlhf_skip_names_what_is_missing(report):
    res = report["checks"]["openrlhf"]
    assert res["status"] == "skipped" and "No module named" in res["reason"]
    assert "ray" in res["too_large_to_ship"]


def test_bad_arguments_give_one_error_line(tmp_path):
    proc = _run(["--out", str(tmp_path / "o"), "--only", "losses,entropyy"], tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --only: unknown check 'entropyy'")
    assert not (tmp_path / "o" / "device_check.json").exists()


def test_time_budget_skips_checks_instead_of_running_over(tmp_path):
    args = ["--cpu", "--out", str(tmp_path / "o"), "--budget", "1", "--only", "losses,pocket"]
    proc = _run(args, tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads((tmp_path / "o" / "device_check.json").read_text())
    assert rep["summary"]["skipped"] == ["losses", "pocket"]
    assert all("time budget" in r["reason"] and r["wall_s"] == 0.0 for r in rep["checks"].values())


def test_compare_against_hand_computed_values():
    ok = compare(1.001, 1.0, rtol=1e-3, atol=0.0)
    assert ok["ok"] and ok["max_abs"] == pytest.approx(1e-3)
    bad = compare([1.0, 2.0022], [1.0, 2.0], rtol=1e-3, atol=0.0)  # 0.0022 > 0.002
    assert not bad["ok"] and bad["max_rel"] == pytest.approx(1.1e-3)
    assert not compare(float("nan"), 1.0, rtol=1.0, atol=1.0)["ok"]


def test_ray_stub_decorates_and_refuses():
    from harness.devicecheck import raystub

    saved = {k: v for k, v in sys.modules.items() if k == "ray" or k.startswith("ray.")}
    try:
        for k in saved:
            del sys.modules[k]
        if not raystub.install():
            pytest.skip("a real ray is installed here")
        import ray
        from ray.util.placement_group import placement_group

        class A:
            pass

        assert ray.remote(num_gpus=1)(A) is A and ray.remote(A) is A
        with pytest.raises(RuntimeError, match="stub"):
            ray.get(None)
        with pytest.raises(RuntimeError, match="stub"):
            placement_group([])
    finally:
        for k in [k for k in sys.modules if k == "ray" or k.startswith("ray.")]:
            del sys.modules[k]
        sys.modules.update(saved)
