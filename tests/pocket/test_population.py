"""Population training (harness/backends/pocket/population.py): a member is its separate run up to float rounding,
a rerun is bit-identical, a member's numbers do not depend on the other members, and a population resumed after
a kill (SIGKILL of a real process) or from checkpoints of different steps ends as an uninterrupted one."""

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch

import harness
from harness.backends.pocket.population import Population, why_apart
from harness.backends.pocket.trainer import PocketTrainer
from harness.io import read_jsonl
from harness.run.config import load_config

ROOT = Path(__file__).resolve().parents[2]
METHODS = harness.list_methods()
# metrics of the rollout (same samples, same rewards): rounding of the forward only
ROLLOUT_KEYS = ("reward/mean", "entropy", "entropy/rollout_token_mean", "rollout/neg_logprob", "response/length")
ROLLOUT_KEYS += ("cov/term", "cov/vanilla", "cov/mean", "cov/top_2pct", "cov/top_20pct", "cov/top_50pct")
# of the updates: also rounding of the batched backward and of the optimizer's arithmetic
UPDATE_KEYS = ("ppo_kl", "ppo_kl_abs", "clipfrac", "grad_norm", "selected/count", "entropy/token_mean")
TOL_ROLLOUT = (1e-6, 1e-4)  # (absolute, relative)
TOL_UPDATE = (1e-6, 1e-3)


def _config(cache, method="grpo", seed=0, steps=1, eval_every=0, **train):
    d = {
        "backend": "pocket",
        "seed": seed,
        "method": {"name": method, **({"prm_lr": 5e-4} if method == "prime" else {})},
        # a short supervised warm start, so that rewards (and advantages) are not all zero
        "model": {
            "name": "pocket-0.1m",
            "cache_dir": str(cache),
            "warm_start": {"enabled": "true", "max_steps": 60, "min_steps": 60, "check_every": 60, "target_acc": 0.0},
        },
        "task": {"name": "countdown", "test_size": 16},
        "train": {
            "steps": steps,
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "updates_per_rollout": 2,
            "micro_batch_size": 4,
            "max_new_tokens": 6,
            "checkpoint_every": 1,
            **train,
        },
        "eval": {"every": eval_every, "n_samples": 2, "max_problems": 8},
        "logging": {"progress": False},
    }
    return load_config(d)


def _quiet(*_a, **_k):
    pass


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_jsonl(run_dir / "metrics.jsonl")]


def _close(a: float, b: float, tol) -> bool:
    return abs(a - b) <= tol[0] + tol[1] * abs(a)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warm")


@pytest.fixture(scope="module")
def population_of_every_method(cache, tmp_path_factory):
    """One population holding every registered method (seed 0), one step."""
    root = tmp_path_factory.mktemp("population")
    trainers = [PocketTrainer(_config(cache, m), root / m, log=_quiet) for m in METHODS]
    results = Population(trainers, log=_quiet).run()
    failed = {m: r for m, r in zip(METHODS, results) if isinstance(r, BaseException)}
    assert not failed, {m: "".join(traceback.format_exception(e)) for m, e in failed.items()}
    return root


@pytest.mark.parametrize("method", METHODS)
def test_member_equals_its_separate_run_at_step_1(method, cache, population_of_every_method, tmp_path):
    """The same samples and rewards; the step's metrics within float rounding (the batched products, the fixed
    widths and the optimizer's arithmetic round differently). KL-Cov's update differs by more: its penalty
    beta*|log r| has the gradient beta*sign(log r), and on the first mini-batch log r (current vs rollout log-probs
    of the same weights, computed by two kernels) is rounding noise, so the sign on its selected token is too."""
    PocketTrainer(_config(cache, method), tmp_path / "alone", log=_quiet).run()
    (sep,) = _rows(tmp_path / "alone")
    (pop,) = _rows(population_of_every_method / method)
    assert sep["reward/mean"] > 0  # the warm start gives the updates something to learn from
    assert set(sep) == set(pop)
    for k in ROLLOUT_KEYS:
        assert _close(sep[k], pop[k], TOL_ROLLOUT), (k, sep[k], pop[k])
    for k in UPDATE_KEYS:
        if k not in sep:
            continue
        if method == "kl_cov" and k != "selected/count":
            assert math.isfinite(pop[k])
            continue
        assert _close(sep[k], pop[k], TOL_UPDATE), (k, sep[k], pop[k])
    for k in sep:  # the method's own metrics (prm/loss, the adaptive coefficient, ...) too
        if k.startswith(f"{method}/") or k == "prm/loss":
            assert _close(sep[k], pop[k], TOL_UPDATE if method != "kl_cov" else (math.inf, 0)), (k, sep[k], pop[k])


def _mixed(cache, steps=3, **train):
    """Three members of different seeds and methods (PRIME's PRM among them), DAPO filtering on, eval every step."""
    train = {"dynamic_filtering": True, "max_gen_batches": 2, **train}
    return [_config(cache, m, seed, steps, 1, **train) for m, seed in (("grpo", 0), ("prime", 1), ("clip_cov", 2))]


def _run(configs, root: Path, names) -> None:
    results = Population([PocketTrainer(c, root / n, log=_quiet) for c, n in zip(configs, names)], log=_quiet).run()
    for r in results:
        assert not isinstance(r, BaseException), "".join(traceback.format_exception(r))


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)


def _same_run(a: Path, b: Path) -> None:
    assert _rows(a) == _rows(b)
    for f in sorted((a / "eval").glob("*.json")):
        assert json.loads(f.read_text()) == json.loads((b / "eval" / f.name).read_text()), f.name
    ca, cb = _weights(a), _weights(b)
    assert ca["step"] == cb["step"]
    for name, t in ca["model"].items():
        assert torch.equal(t, cb["model"][name]), name
    for k, st in ca["opt"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(st[key], cb["opt"]["state"][k][key]), (k, key)


def test_rerun_is_bit_identical_and_members_do_not_depend_on_each_other(cache, tmp_path):
    configs = _mixed(cache)
    names = ["a", "b", "c"]
    _run(configs, tmp_path / "first", names)
    _run(configs, tmp_path / "again", names)
    _run([configs[1]], tmp_path / "alone", ["b"])  # the PRIME member without the others
    _run([configs[2], configs[0]], tmp_path / "pair", ["c", "a"])  # the others, in another order
    for n in names:
        _same_run(tmp_path / "first" / n, tmp_path / "again" / n)
    _same_run(tmp_path / "first" / "b", tmp_path / "alone" / "b")
    _same_run(tmp_path / "first" / "a", tmp_path / "pair" / "a")
    _same_run(tmp_path / "first" / "c", tmp_path / "pair" / "c")
    rows = _rows(tmp_path / "first" / "b")
    assert [r["step"] for r in rows] == [1, 2, 3] and any("prm/loss" in r for r in rows)


def test_members_resumed_at_different_steps_catch_up_exactly(cache, tmp_path):
    """A kill while the members' checkpoints were being written leaves them at different steps: the ones behind
    train alone up to the others, then join them; every member ends as in an uninterrupted population."""
    full = _mixed(cache, steps=4)
    names = ["a", "b", "c"]
    _run(full, tmp_path / "straight", names)
    resumed = tmp_path / "resumed"
    _run(_mixed(cache, steps=1)[:1], resumed, ["a"])  # member a checkpointed at step 1
    _run(_mixed(cache, steps=3)[1:2], resumed, ["b"])  # member b at step 3, member c not started
    _run(full, resumed, names)
    for n in names:
        _same_run(tmp_path / "straight" / n, resumed / n)


KILL_SCRIPT = """
import json, sys
from pathlib import Path
from harness.backends.pocket.population_runner import run_population
from harness.run.config import load_config
spec = json.loads(sys.argv[1])
out = run_population([load_config(c) for c in spec["configs"]], [Path(d) for d in spec["dirs"]], quiet=True)
assert all(isinstance(r, dict) and r["status"] in ("completed", "insufficient_updates") for r in out), out
"""


def _population_process(configs, dirs):
    spec = json.dumps({"configs": [c.to_dict() for c in configs], "dirs": [str(d) for d in dirs]})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, spec], env=env, cwd=ROOT)


def test_sigkill_mid_run_then_resume_ends_as_uninterrupted(cache, tmp_path):
    configs = _mixed(cache, steps=6, checkpoint_every=2)
    straight = [tmp_path / "straight" / n for n in "abc"]
    p = _population_process(configs, straight)
    assert p.wait(timeout=600) == 0
    killed = [tmp_path / "killed" / n for n in "abc"]
    p = _population_process(configs, killed)
    deadline = time.time() + 600
    while time.time() < deadline:  # kill after step 3 is logged: step 2's checkpoint exists, step 3 is lost
        rows = read_jsonl(killed[0] / "metrics.jsonl") if (killed[0] / "metrics.jsonl").exists() else []
        if len(rows) >= 3 or p.poll() is not None:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the population finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not (killed[0] / "result.json").exists()
    p = _population_process(configs, killed)
    assert p.wait(timeout=600) == 0
    for a, b in zip(straight, killed):
        _same_run(a, b)
        ra, rb = json.loads((a / "result.json").read_text()), json.loads((b / "result.json").read_text())
        assert ra["summary"] == rb["summary"] and ra["eval"] == rb["eval"] and ra["run_id"] == rb["run_id"]


def test_why_apart_names_the_difference(cache):
    a, b = _config(cache, "grpo", 0), _config(cache, "kl_cov", 3)
    assert why_apart([a, b]) is None  # seed and method may differ
    c = copy.deepcopy(a)
    c.train.lr = 1e-3
    assert why_apart([a, c]) == "cells differ in train.lr: 0.0005 -> 0.001"
    d = copy.deepcopy(a)
    d.model.name = "pocket-1m"
    assert why_apart([a, d]) == "cells differ in model.name: 'pocket-0.1m' -> 'pocket-1m'"
    e = copy.deepcopy(a)
    e.model.name = "/models/qwen"
    assert "not a pocket size" in why_apart([e])
