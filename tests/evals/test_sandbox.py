"""Hostile-program battery: each program is contained, classified, and the grader survives.

Runs the real sandbox (namespaces, chroot, rlimits, unprivileged uid). CI runs as root, where every isolation
feature must be in effect; as a normal user the checks that need root are skipped and ``missing`` says why.
"""

import os
import time
import uuid

import pytest

from harness.evals.code_grader import classify, grade_code_many
from harness.evals.sandbox import Limits, Sandbox

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid drop / chroot checks need root")


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(limits=Limits(wall_s=4, cpu_s=4, memory_mb=512, nproc=16, output_kill_bytes=4 << 20), workers=2)
    yield sb
    sb.close()


def run(sb, code):
    res = sb.run({"prog.py": code}, {"mode": "script"})
    return res, classify(res, {"fmt": "humaneval"})


@needs_root
def test_full_isolation_as_root(sandbox):
    assert sandbox.missing == [], sandbox.missing
    assert sandbox.isolation["network"] == "private" and sandbox.isolation["filesystem"] == "chroot"
    assert sandbox.isolation["user"].startswith("uid ")


def test_missing_is_reported_plainly():
    sb = Sandbox.__new__(Sandbox)
    sb.is_root, sb.isolation = (
        False,
        {"user": "unchanged", "network": "shared", "pid": "shared", "filesystem": "shared"},
    )
    text = sb.describe()
    for word in ("network", "PID", "filesystem", "unprivileged uid"):
        assert word in text


@needs_root
def test_concurrent_sandboxes_get_distinct_uids(sandbox):
    other = Sandbox(workers=2)
    try:
        assert other.uid_base != sandbox.uid_base
        assert abs(other.uid_base - sandbox.uid_base) >= 2
    finally:
        other.close()
    again = Sandbox(workers=1)  # the released block is reusable
    try:
        assert again.uid_base != sandbox.uid_base
    finally:
        again.close()


def test_correct_and_wrong_programs(sandbox):
    assert run(sandbox, "def f(x):\n    return x + 1\nassert f(1) == 2\n")[1]["status"] == "passed"
    res, v = run(sandbox, "assert 1 == 2, 'nope'\n")
    assert v == {"correct": False, "status": "failed", "detail": "AssertionError: nope (line 1)"}


def test_battery(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_SECRET", "s3cret")
    secret = tmp_path / "root_only.txt"
    secret.write_text("top secret")
    os.chmod(secret, 0o600)
    outside = f"/tmp/harness-escape-{uuid.uuid4().hex}"
    tmp_target = tmp_path / "written_by_program.txt"
    os.chmod(tmp_path, 0o777)  # even a world-writable directory must stay out of reach
    hostile = {
        "infinite_loop": ("while True:\n    pass\n", "timeout"),
        "sleeping_loop": ("import time\nwhile True:\n    time.sleep(0.5)\n", "timeout"),
        "memory_bomb": ("x = bytearray(8 << 30)\n", "failed"),
        "many_forks": (
            "import os, time\nfor i in range(200):\n    if os.fork() == 0:\n        time.sleep(30)\n"
            "        os._exit(0)\n",
            "failed",
        ),
        # /tmp inside the sandbox is private to the program: the write succeeds there and vanishes with it
        "write_tmp": (f"open({outside!r}, 'w').write('x')\n", "passed" if ROOT else None),
        "write_var_tmp": (f"open('/var/tmp/harness-escape-{uuid.uuid4().hex}', 'w').write('x')\n", "failed"),
        "write_world_writable": (f"open({str(tmp_target)!r}, 'w').write('x')\n", "failed"),
        "read_root_only": (f"print(open({str(secret)!r}).read())\n", "failed"),
        "read_shadow": ("print(open('/etc/shadow').read())\n", "failed"),
        "network": ("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n", "failed"),
        "network_local": ("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)\n", "failed"),
        "kill_parent": (
            "import os, signal\nfor p in (os.getppid(), -1, 1):\n    try:\n        os.kill(p, 9)\n"
            "    except OSError:\n        pass\nraise SystemExit(3)\n",
            "failed",
        ),
        "huge_output": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "error"),
        "early_exit0": ("import os\nos._exit(0)\nassert False\n", "failed"),
        "sys_exit0": ("import sys\nsys.exit(0)\nassert False\n", "failed"),
        "fake_report": (
            "import os\nfor fd in range(3, 20):\n    try:\n"
            "        os.write(fd, b'deadbeef {\"ok\": true}\\n')\n"
            "    except OSError:\n        pass\nos._exit(0)\n",
            "failed",
        ),
        "env_leak": (
            "import os\nassert 'HARNESS_TEST_SECRET' not in os.environ\nassert os.environ['HOME'] == "
            "'/sandbox' or True\n",
            "passed",
        ),
        "big_file": ("open('big', 'wb').write(b'x' * (64 << 20))\n", "failed"),
    }
    t0 = time.monotonic()
    results = sandbox.run_many([({"prog.py": code}, {"mode": "script"}) for code, _ in hostile.values()])
    elapsed = time.monotonic() - t0
    got = {name: classify(r, {"fmt": "humaneval"}) for name, r in zip(hostile, results)}
    for (name, (_, expected)), r in zip(hostile.items(), results):
        if expected is not None:
            assert got[name]["status"] == expected, (name, got[name], r.stderr[-300:])
    assert not os.path.exists(outside) and not tmp_target.exists()
    assert "Network is unreachable" in got["network"]["detail"]
    assert "output limit" in got["huge_output"]["detail"]
    assert len(results[list(hostile).index("huge_output")].stdout) <= sandbox.limits.output_bytes
    assert got["early_exit0"]["detail"].startswith("exited before the tests finished")
    assert elapsed < 30
    # the grader survived and still works
    assert run(sandbox, "assert sum(range(5)) == 10\n")[1]["status"] == "passed"


@needs_root
def test_no_process_survives_a_program(sandbox):
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "    os._exit(0)\ntime.sleep(0.2)\n"
    )
    res, v = run(sandbox, code)
    assert v["status"] == "passed"
    time.sleep(0.2)
    uids = {sandbox.uid_base + i for i in range(sandbox.workers)}
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _uid_of(p) in uids]
    assert alive == [], [_describe(p) for p in alive]


def _describe(pid):
    try:
        status = open(f"/proc/{pid}/status").read().splitlines()
        return [ln for ln in status if ln.startswith(("Name", "State", "PPid", "NSpid", "Uid"))]
    except OSError as e:
        return str(e)


def _uid_of(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def test_programs_cannot_plant_files_for_later_samples(sandbox):
    plant = (
        "import os\nfor p in ('/tmp/plant', 'plant', '/sandbox/../plant', '/var/tmp/plant', '/dev/shm/plant'):\n"
        "    try:\n        open(p, 'w').write('answer')\n    except OSError:\n        pass\n"
    )
    look = (
        "import os, glob\nfound = [p for p in ('/tmp/plant', 'plant', '/plant', '/var/tmp/plant', '/dev/shm/plant')"
        " if os.path.exists(p)]\nfound += glob.glob('/tmp/*') + glob.glob('/tmp/harness-sandbox-*/*')\n"
        "assert not found, found\n"
    )
    # sequential (same slot reused) and concurrent (other slot)
    results = sandbox.run_many(
        [({"prog.py": plant}, {"mode": "script"}), ({"prog.py": look}, {"mode": "script"})]
        + [({"prog.py": look}, {"mode": "script"})]
    )
    assert [classify(r, {})["status"] for r in results] == ["passed", "passed", "passed"], [r.report for r in results]
    assert not os.path.exists("/tmp/plant")


def test_many_programs_in_parallel(sandbox):
    items = [
        {
            "id": str(i),
            "prompt": "def f(x):\n",
            "response": f"    return x * {i}\n",
            "test": f"def check(c):\n    assert c(2) == {2 * i}\n",
            "entry_point": "f",
        }
        for i in range(12)
    ]
    items[5]["response"] = "    return -1\n"
    verdicts = grade_code_many(items, sandbox)
    assert [v["correct"] for v in verdicts] == [i != 5 for i in range(12)]


@pytest.mark.skipif(not ROOT or not os.path.exists("/usr/bin/setpriv"), reason="needs root + setpriv")
def test_as_unprivileged_user_it_uses_user_namespaces_and_says_what_is_missing(tmp_path):
    """Run the grader itself as nobody (system python, stdlib only): isolation via user namespaces. The probe user
    may not be able to read the checkout (a clone inside a mode-700 home), so it imports a world-readable copy of
    the three stdlib-only sandbox files."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "evals"
    repo = Path(tempfile.mkdtemp(prefix="harness-sandbox-probe-", dir="/tmp"))  # /tmp: reachable by nobody
    os.chmod(repo, 0o755)
    (repo / "evals").mkdir(mode=0o755)
    for name in ("__init__.py", "sandbox.py", "_sandbox_launcher.py", "_sandbox_runner.py"):
        shutil.copyfile(src / name, repo / "evals" / name)
        os.chmod(repo / "evals" / name, 0o644)
    script = (
        "import sys, json; sys.path.insert(0, %r)\n"
        "from evals.sandbox import Sandbox, Limits\n"
        "sb = Sandbox(limits=Limits(wall_s=3, cpu_s=3), workers=1)\n"
        "codes = ['import socket\\nsocket.create_connection((\"127.0.0.1\", 22), timeout=1)',\n"
        '         \'open("/tmp/harness_nonroot_probe", "w").write("1")\\n\'\n'
        "         'import os\\nassert os.listdir(\"/tmp\")',\n"
        "         'while True: pass']\n"
        "res = [sb.run({'prog.py': c}, {'mode': 'script'}) for c in codes]\n"
        "print(json.dumps({'iso': sb.isolation, 'missing': sb.missing, 'describe': sb.describe(),\n"
        "                  'res': [(r.status, r.report) for r in res]}))\n"
        "sb.close()\n"
    ) % str(repo)
    try:
        r = subprocess.run(
            ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
            cwd="/tmp",
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    if "sandbox self-test failed" in r.stderr and "unshare" in r.stderr:
        pytest.skip("this kernel does not allow unprivileged user namespaces")
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["iso"]["user"] == "user-namespace" and out["iso"]["network"] == "private"
    assert out["describe"].startswith("sandbox: MISSING") and "separate uid" in out["describe"]
    (net_status, net_rep), (tmp_status, tmp_rep), (loop_status, _) = out["res"]
    assert net_status == "completed" and "Network is unreachable" in net_rep["error"]
    assert tmp_status == "completed" and tmp_rep["ok"]  # wrote into its private /tmp ...
    assert not os.path.exists("/tmp/harness_nonroot_probe")  # ... which is not the real one
    assert loop_status == "timeout"
