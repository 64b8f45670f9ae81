"""The vLLM engine's logic on a CPU: request planning (one request of n=k per problem), resume, data-parallel
groups in real spawned processes, merge order, failures, CLI flags, and the provenance of eval results.

vLLM itself cannot run here (no GPU, not installed): the engine reaches it through one documented seam
(``VLLMEngine(runtime=...)``), and these tests pass ``vllm_stand_in.STAND_IN`` there — the one stand-in of
the eval tests, described in tests/evals/vllm_stand_in.py. The real vLLM path is tests/evals/test_vllm_gpu.py.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import zlib
from pathlib import Path

import pytest

from harness.cli import main
from harness.evals import vllm_runner as vr
from harness.evals.engines import Request, VLLMEngine
from harness.evals.evaluate import evaluate
from harness.evals.suites import Protocol, get_suite

sys.path.insert(0, str(Path(__file__).parent))
from vllm_stand_in import STAND_IN  # noqa: E402

SAMPLED = Protocol(n_samples=4, temperature=0.6, top_p=1.0, max_tokens=16)
GREEDY = Protocol(max_tokens=16)


def reqs(problems: dict[str, list[int]]) -> list[Request]:
    return [Request((pid, s), f"prompt of {pid}") for pid, samples in problems.items() for s in samples]


def crc_seed(seed, pid, sample):  # the documented rule: crc32 of repr((seed, id, first sample)), 31 bits
    return zlib.crc32(repr((seed, pid, sample)).encode()) & 0x7FFFFFFF


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "stand_in_calls.jsonl"
    monkeypatch.setenv("VLLM_STAND_IN_LOG", str(path))
    monkeypatch.delenv("VLLM_STAND_IN_FAIL_ON", raising=False)
    monkeypatch.delenv("VLLM_STAND_IN_FAIL_START", raising=False)

    def calls():
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    return calls


# ------------------------------------------------------------------------------------------- planning


def test_plan_one_request_per_problem_with_n():
    aime = reqs({f"p{i}": list(range(32)) for i in range(30)})
    plan = vr.plan(aime, seed=7, sampled=True)
    assert len(plan) == 30 and [p.n for p in plan] == [32] * 30
    assert [r.key for r in plan[3].requests] == [("p3", s) for s in range(32)]
    assert plan[3].seed == crc_seed(7, "p3", 0) and plan[3].prompt == "prompt of p3"
    greedy = vr.plan(reqs({"a": [0], "b": [0]}), seed=7, sampled=False)
    assert [(p.n, p.seed) for p in greedy] == [(1, None), (1, None)]


def test_plan_asks_only_for_missing_samples():
    # the resumable JSONL already holds samples 0-4 of p1 and all of p0: evaluate passes only the rest
    plan = vr.plan(reqs({"p1": [5, 6, 7], "p2": [0, 1, 2, 3, 4, 5, 6, 7]}), seed=0, sampled=True)
    assert [(p.requests[0].key, p.n) for p in plan] == [(("p1", 5), 3), (("p2", 0), 8)]
    assert plan[0].seed == crc_seed(0, "p1", 5)


def test_assign_groups_by_load_by_hand():
    P = lambda *ns: [vr.PromptRequest("x", tuple(range(n)), None) for n in ns]  # noqa: E731
    assert vr.assign_groups(P(32, 32, 32, 32, 32), 2) == [[0, 2, 4], [1, 3]]
    assert vr.assign_groups(P(3, 1, 1, 2), 2) == [[0], [1, 2, 3]]  # loads 3 | 1, 2, 4
    assert vr.assign_groups(P(3, 1, 1, 2), 3) == [[0], [1, 3], [2]]  # p3: groups 1 and 2 tie at 1 -> 1
    assert vr.assign_groups(P(5), 3) == [[0], [], []]
    with pytest.raises(ValueError, match="at least one"):
        vr.assign_groups(P(1), 0)


def test_device_groups():
    assert vr.device_groups(2, 2, visible="4,5,6,7") == ["4,5", "6,7"]
    assert vr.device_groups(4, 2, visible=None, installed=8) == ["0,1", "2,3", "4,5", "6,7"]
    assert vr.device_groups(3, 1, visible="GPU-a, GPU-b,GPU-c") == ["GPU-a", "GPU-b", "GPU-c"]
    with pytest.raises(ValueError, match=r"needs 4 GPUs, but CUDA_VISIBLE_DEVICES='0,1,2' lists 3"):
        vr.device_groups(2, 2, visible="0,1,2")
    with pytest.raises(ValueError, match="needs 2 GPUs, but this machine has 0"):
        vr.device_groups(2, 1, visible=None, installed=0)


def test_texts_follow_completion_index():
    class Completion:
        def __init__(self, i, t):
            self.index, self.text = i, t

    class R:
        outputs = [Completion(2, "c"), Completion(0, "a"), Completion(1, "b")]

    p = vr.PromptRequest("x", ("r0", "r1", "r2"), 1)
    assert vr.texts_of(p, R()) == ["a", "b", "c"]
    with pytest.raises(RuntimeError, match="2 outputs for a request of n=3"):
        R.outputs = R.outputs[:2]
        vr.texts_of(p, R())


# ------------------------------------------------------------------------------------- the engine


def test_engine_one_generate_with_n_in_request_order(log):
    engine = VLLMEngine("org/model", gpu_memory_utilization=0.5, max_model_len=4096, seed=3, runtime=STAND_IN)
    todo = reqs({"2+3?": [0, 1, 2, 3], "4-1?": [1, 3]})
    todo = [Request(r.key, r.key[0]) for r in todo]
    out = list(engine.generate(todo, SAMPLED, seed=3))
    assert [r.key for r, _ in out] == [r.key for r in todo]
    s23, s41 = crc_seed(3, "2+3?", 0), crc_seed(3, "4-1?", 1)
    # output j of a request serves its j-th missing sample; even j answers right, odd j one more
    assert [t for _, t in out] == [
        f"[seed={s23} i=0] \\boxed{{5}}",
        f"[seed={s23} i=1] \\boxed{{6}}",
        f"[seed={s23} i=2] \\boxed{{5}}",
        f"[seed={s23} i=3] \\boxed{{6}}",
        f"[seed={s41} i=0] \\boxed{{3}}",
        f"[seed={s41} i=1] \\boxed{{4}}",
    ]
    (call,) = log()
    assert call["prompts"] == ["2+3?", "4-1?"] and [p["n"] for p in call["params"]] == [4, 2]
    assert call["params"][0] == {"n": 4, "temperature": 0.6, "top_p": 1.0, "max_tokens": 16, "seed": s23}
    assert call["llm"] == {
        "model": "org/model",
        "tensor_parallel_size": 1,
        "seed": 3,
        "gpu_memory_utilization": 0.5,
        "dtype": "auto",
        "max_model_len": 4096,
    }
    assert call["pid"] == os.getpid()
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        list(engine.generate(todo, SAMPLED))


def test_data_parallel_groups_in_spawned_processes_merge_in_order(log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    todo = [Request((f"{a}+{a}?", s), f"{a}+{a}?") for a in range(5) for s in range(2)]
    single = VLLMEngine("org/model", runtime=STAND_IN)
    expected = list(single.generate(todo, SAMPLED))
    single.close()
    engine = VLLMEngine("org/model", data_parallel_size=2, runtime=STAND_IN)
    try:
        got = list(engine.generate(todo, SAMPLED))
    finally:
        engine.close()
    assert got == expected  # same texts, same (request) order
    calls = log()[1:]
    assert sorted(c["devices"] for c in calls) == ["0", "1"]
    assert len({c["pid"] for c in calls}) == 2 and os.getpid() not in {c["pid"] for c in calls}
    by_dev = {c["devices"]: c["prompts"] for c in calls}
    assert by_dev == {"0": ["0+0?", "2+2?", "4+4?"], "1": ["1+1?", "3+3?"]}  # round-robin (equal n)
    assert multiprocessing.active_children() == []


def test_data_parallel_needs_the_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(ValueError, match="needs 4 GPUs"):
        VLLMEngine("org/model", data_parallel_size=2, tensor_parallel_size=2, runtime=STAND_IN)


def test_a_group_that_fails_to_start_stops_all(log, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("VLLM_STAND_IN_FAIL_START", "1")
    with pytest.raises(RuntimeError, match=r"group 1 \(CUDA_VISIBLE_DEVICES=1\) failed to start"):
        VLLMEngine("org/model", data_parallel_size=2, runtime=STAND_IN)
    assert multiprocessing.active_children() == []


def test_engine_refuses_bad_settings():
    for kw, msg in [
        ({"data_parallel_size": 0}, "--data-parallel-size 0"),
        ({"tensor_parallel_size": 0}, "--tensor-parallel-size 0"),
        ({"gpu_memory_utilization": 1.2}, "--gpu-memory-utilization 1.2"),
        ({"max_model_len": 0}, "--max-model-len 0"),
    ]:
        with pytest.raises(ValueError, match=msg):
            VLLMEngine("org/model", runtime=STAND_IN, **kw)


# ---------------------------------------------------------------- through evaluate(): resume, failures


def test_evaluate_resumes_and_keeps_what_finished_when_a_group_fails(log, monkeypatch, tiny_data, tmp_path):
    suite = get_suite("math500")
    out = tmp_path / "out"
    kw = dict(data_dir=str(tiny_data), template="raw", n=4, temperature=0.6, max_tokens=16, progress=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("VLLM_STAND_IN_FAIL_ON", "1")
    engine = VLLMEngine("org/model", data_parallel_size=2, runtime=STAND_IN)
    try:
        with pytest.raises(RuntimeError, match=r"1 of 2 vLLM data-parallel groups failed"):
            evaluate(engine, [suite], out, **kw)
    finally:
        engine.close()
    lines = [json.loads(x) for x in (out / "math500.generations.jsonl").read_text().splitlines()]
    # group 0 served problems 0 and 2 (round-robin): their 8 samples were written before the error
    assert sorted({(r["id"], r["sample"]) for r in lines}) == sorted((f"tiny/{i}", s) for i in (0, 2) for s in range(4))
    with open(out / "math500.generations.jsonl", "a") as f:
        f.write('{"id": "tiny/1", "sample": 0, "resp')  # and a torn last line, as after a kill
    monkeypatch.delenv("VLLM_STAND_IN_FAIL_ON")
    n_calls = len(log())
    engine = VLLMEngine("org/model", runtime=STAND_IN)
    res = evaluate(engine, [suite], out, **kw)["suites"]["math500"]
    (call,) = log()[n_calls:]
    assert call["prompts"] == ["4+4?", "1+1?"] and [p["n"] for p in call["params"]] == [4, 4]
    assert res["resumed_samples"] == 8 and res["n_samples"] == 4
    assert res["metrics"]["avg@4"] == pytest.approx(0.5) and res["metrics"]["pass@4"] == pytest.approx(1.0)


def test_eval_results_carry_provenance(log, tiny_data, tmp_path):
    out = tmp_path / "out"
    engine = VLLMEngine("org/model", runtime=STAND_IN)
    evaluate(
        engine,
        [get_suite("math500")],
        out,
        data_dir=str(tiny_data),
        template="raw",
        n=2,
        temperature=0.6,
        max_tokens=16,
        progress=False,
    )
    evaluate(engine, [get_suite("aime24")], out, fixtures=True, limit=2, n=2, max_tokens=16, progress=False)
    summary = json.loads((out / "results.json").read_text())
    prov = summary["provenance"]
    assert set(prov) == {
        "git_commit",
        "git_dirty",
        "git_diff_sha256",
        "untracked",
        "packages",
        "datasets",
        "hardware",
        "created",
    }
    by_name = {d["name"]: d for d in prov["datasets"]}
    assert set(by_name) == {"math500", "aime24"}  # the first invocation's entry is kept
    problems = get_suite("math500").load(data_dir=str(tiny_data), template="raw")
    canonical = "".join(
        json.dumps(p, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n" for p in problems
    ).encode()
    assert by_name["math500"] == {
        "name": "math500",
        "source": str(tiny_data / "math500.jsonl"),
        "revision": None,
        "sha256": hashlib.sha256(canonical).hexdigest(),
        "rows": 4,
        "role": "eval",  # an eval's data, keyed apart from a run's training data (issue 37 item 4)
    }
    assert by_name["aime24"]["source"].endswith("fixtures/aime24.jsonl") and by_name["aime24"]["rows"] == 2


# ------------------------------------------------------------------------------------------ the CLI


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--engine", "vllm", "--data-parallel-size", "0"], "--data-parallel-size 0: must be >= 1"),
        (["--engine", "vllm", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization 1.5: allowed"),
        (
            ["--engine", "vllm", "--max-model-len", "16"],
            "--max-model-len 16 leaves no room for the prompt: suite math500 generates up to 16 new tokens",
        ),
        (["--data-parallel-size", "2", "--max-model-len", "99"], "--data-parallel-size, --max-model-len: vllm engine"),
    ],
)
def test_cli_refuses_bad_engine_flags(argv, msg, tiny_data, tmp_path, capsys):
    base = [
        "eval",
        "--model",
        "org/model",
        "--suites",
        "math500",
        "--data-dir",
        str(tiny_data),
        "--max-tokens",
        "16",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(base + argv) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_engine_kwargs():
    from harness.cli import build_parser
    from harness.commands.eval import engine_kwargs

    args = build_parser().parse_args(
        [
            "eval",
            "--model",
            "m",
            "--suites",
            "aime24",
            "--engine",
            "vllm",
            "--tensor-parallel-size",
            "2",
            "--data-parallel-size",
            "4",
            "--gpu-memory-utilization",
            "0.9",
            "--max-model-len",
            "9000",
            "--seed",
            "5",
        ]
    )
    assert engine_kwargs(args) == {
        "chat": None,
        "seed": 5,
        "tensor_parallel_size": 2,
        "data_parallel_size": 4,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 9000,
    }
    args = build_parser().parse_args(["eval", "--model", "m", "--suites", "aime24", "--threads", "1"])
    assert engine_kwargs(args) == {"chat": None, "batch_size": 8, "device": None, "threads": 1}
