"""Metrics bridge (OpenRLHF status -> metrics.jsonl / result.json) and the never-raising reward function."""

import json

import pytest
import torch

from harness.backends.openrlhf import bridge, reward

STATUS = {
    "rollout/reward_mean": 0.25,
    "reward": 0.3,
    "harness/entropy": 0.8,
    "ppo_clip_ratio": 0.01,
    "ppo_kl": -0.002,
    "rollout/response_length_mean": 120.0,
    "actor_lr": 5e-7,
    "timing/generation": 3.0,
    "timing/ppo_train": 2.0,
    "cov/mean": 0.004,
    "cov/top_0.02pct": 1.5,
    "selected/frac": 0.002,
    "reward/grading_failures": 0.0,
    "actor_grad_norm": 0.7,
    "entropy_loss": 0.79,
    "generated_samples": ["text", 1.0],
    "bad": float("nan"),
    "harness/selected_per_sample": 0.5,
    "rollout/num_samples": 2048.0,
}


def test_status_to_metrics_row():
    row = bridge.to_harness_metrics(STATUS, 7, prev_entropy=1.0, wall_s=12.5)
    assert row == {
        "step": 7,
        "reward/mean": 0.25,
        "entropy": 0.8,
        "entropy/delta": pytest.approx(-0.2),
        "clipfrac": 0.01,
        "ppo_kl": -0.002,
        "response/length": 120.0,
        "lr": 5e-7,
        "time/rollout": 3.0,
        "time/update": 2.0,
        "cov/mean": 0.004,
        "cov/top_0.02pct": 1.5,
        "selected/frac": 0.002,
        "reward/grading_failures": 0.0,
        "openrlhf/reward": 0.3,
        "openrlhf/actor_grad_norm": 0.7,
        "openrlhf/entropy_loss": 0.79,
        "openrlhf/harness/selected_per_sample": 0.5,
        "openrlhf/rollout/num_samples": 2048.0,
        "selected/count": 1024.0,
        "time/wall": 12.5,
    }


def test_rollout_correction_metrics_keep_their_names():
    """The plug-in's rollout_correction/* keep their names (as on pocket); upstream's own vllm_kl and
    is_filter_ratio stay under openrlhf/."""
    status = {"rollout_correction/filtered_frac": 0.25, "vllm_kl": -0.01, "is_filter_ratio": 0.25}
    row = bridge.to_harness_metrics(status, 1)
    assert row == {
        "step": 1,
        "rollout_correction/filtered_frac": 0.25,
        "openrlhf/vllm_kl": -0.01,
        "openrlhf/is_filter_ratio": 0.25,
    }


def test_missing_is_missing_not_zero():
    row = bridge.to_harness_metrics({"policy_loss": 0.1}, 1)
    assert row == {"step": 1, "openrlhf/policy_loss": 0.1}
    assert "entropy" not in row and "entropy/delta" not in row


def test_result_json_from_metrics(tmp_path):
    for step in range(1, 11):
        bridge.append_metrics(
            tmp_path,
            {
                "step": step,
                "entropy": 1.0 - step / 20,
                "reward/mean": step / 10,
                "time/rollout": 1.0,
                "time/update": 2.0,
            },
        )
    bridge.append_metrics(tmp_path, {"step": 10, "entropy": 99.0})  # replayed step after a resume: ignored
    method = {"name": "kl_cov", "advantage": "grpo", "k_ratio": 0.002}
    spec = {"n_samples": 2, "temperature": 0.6, "top_p": 1.0, "max_tokens": 64, "counts": None}
    for step, acc in ((4, 0.2), (10, 0.4)):
        bridge.write_eval(tmp_path, bridge.eval_payload({"eval_math_pass1": acc, "eval_math_pass2": 0.5}, step, spec))
    payload = bridge.build_result(
        {"model": {"name": "m"}, "task": {"name": "t"}, "seed": 2}, tmp_path, "completed", 42.0, "abc123abc123", method
    )
    path = bridge.write_result(tmp_path, payload)
    got = json.loads(path.read_text())
    assert got["schema_version"] == 1 and got["backend"] == "openrlhf" and got["status"] == "completed"
    assert got["method"] == "kl_cov" and got["advantage"] == "grpo" and got["steps"] == 10
    assert got["summary"] == {
        "entropy_start": pytest.approx(0.95),
        "entropy_end": pytest.approx(0.5),
        "reward_start": pytest.approx(0.1),
        "reward_end": pytest.approx(1.0),
    }
    assert got["timing"] == {"rollout_s": 10.0, "update_s": 20.0}
    assert got["eval"]["step"] == 10 and got["eval"]["suites"]["math"]["metrics"] == {"avg@2": 0.4, "pass@2": 0.5}
    assert got["eval"]["suites"]["math"]["n_problems"] is None  # unknown, never a made-up number
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 10


def test_reward_grades_math():
    out = reward.reward_func(
        ["<prompt>Q? The answer is \\boxed{\\frac{1}{2}}", "<prompt>Q? \\boxed{3}", "<prompt>no box"],
        ["<prompt>Q?", "<prompt>Q?", "<prompt>"],
        ["0.5", "4", "1"],
    )
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0]
    assert torch.equal(out["scores"], out["rewards"])
    assert out["extra_logs"]["reward/grading_failures"].tolist() == [0.0, 0.0, 0.0]


def test_reward_only_grades_the_response():
    # the prompt's own \boxed{} must not count
    out = reward.reward_func(["Example: \\boxed{7}. Answer:"], ["Example: \\boxed{7}. Answer:"], ["7"])
    assert out["rewards"].tolist() == [0.0]


@pytest.mark.parametrize(
    "queries,prompts,labels",
    [
        (["\\boxed{1}"], None, None),
        (["\\boxed{1}"], [None], [object()]),
        ([None], ["p"], ["1"]),
        ([], [], []),
        (["\\boxed{1}", "\\boxed{2}"], ["a"], ["1"]),  # ragged inputs
    ],
)
def test_reward_never_raises_on_odd_input(queries, prompts, labels):
    out = reward.reward_func(queries, prompts, labels)
    assert out["rewards"].shape == (len(queries),)


def test_grading_error_is_reward_zero_and_counted(monkeypatch):
    def broken():
        raise ImportError(reward.MISSING_EXTRA)

    monkeypatch.setattr(reward, "_pool", broken)
    out = reward.reward_func(["\\boxed{1}", "\\boxed{2}"], ["", ""], ["1", "2"])
    assert out["rewards"].tolist() == [0.0, 0.0]
    assert out["extra_logs"]["reward/grading_failures"].tolist() == [1.0, 1.0]


def test_missing_eval_extra_message_names_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_math_verify(name, *a, **k):
        if name == "math_verify":
            raise ImportError("No module named 'math_verify'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(reward, "_POOL", None)
    monkeypatch.setattr(builtins, "__import__", no_math_verify)
    with pytest.raises(ImportError, match=r"entropy-harness\[eval\]"):
        reward._pool()


def test_code_reward_runs_the_tests_in_the_sandbox(monkeypatch):
    monkeypatch.setenv("HARNESS_OPENRLHF_PLUGIN", json.dumps({"reward": "code"}))
    label = json.dumps({"test": "def check(f):\n    assert f(2, 3) == 5\n", "entry_point": "add"})
    good = "```python\ndef add(a, b):\n    return a + b\n```"
    bad = "```python\ndef add(a, b):\n    return a - b\n```"
    out = reward.reward_func(["P" + good, "P" + bad, "P" + good], ["P", "P", "P"], [label, label, "not json"])
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0], reward.grade_code(good, label)  # the verdict, on failure
    assert out["extra_logs"]["reward/grading_failures"].tolist() == [0.0, 0.0, 1.0]  # bad label: counted


def test_results_collection_reads_an_openrlhf_run_dir(tmp_path):
    """The run dir the bridge writes is read by harness.results like any other backend's."""
    import yaml

    from harness.results.collect import collect
    from harness.run.config import load_config

    cfg = load_config(
        {
            "backend": "openrlhf",
            "method": {"name": "kl_cov"},
            "model": {"name": "Qwen/Qwen2.5-7B"},
            "task": {"name": "data/dapo.jsonl"},
            "train": {"steps": 3, "micro_batch_size": 2},
        }
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    for step in (1, 2, 3):
        bridge.append_metrics(
            run, bridge.to_harness_metrics({"rollout/reward_mean": step / 4, "harness/entropy": 1 / step}, step)
        )
    spec = {"n_samples": 4, "temperature": 0.6, "top_p": 1.0, "max_tokens": 64, "counts": {"aime": 30}}
    bridge.write_eval(run, bridge.eval_payload({"eval_aime_pass1": 0.3, "eval_aime_pass4": 0.6}, 3, spec))
    payload = bridge.build_result(
        cfg.to_dict(), run, "completed", 5.0, cfg.run_id(), {"name": "kl_cov", "advantage": "grpo"}
    )
    bridge.write_result(run, payload)
    col = collect([tmp_path])
    assert list(col.runs["status"]) == ["completed"]
    assert list(col.metrics["step"]) == [1, 2, 3]
    assert len(col.evals) == 1 and col.evals.iloc[0]["suite"] == "aime"
