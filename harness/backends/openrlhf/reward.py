"""OpenRLHF reward function file (``--reward.remote_url <this file>``): math or code graded by the harness graders.

OpenRLHF loads this file by path inside each vLLM rollout actor and calls ``reward_func(queries, prompts,
labels)`` with one sample; it swallows exceptions silently (the sample then has no reward). So this function
never raises: a grading error gives reward 0 and ``reward/grading_failures`` 1, which OpenRLHF logs as
``train/reward/grading_failures`` (the harness metrics.jsonl keeps it under the same key).
Math (``openrlhf.reward: math``): harness.evals.math_grader (last ``\\boxed{}`` + math-verify) in a killable worker
process with a timeout; the label is the gold answer. Code (``openrlhf.reward: code``): harness.evals.code_grader in the
evals sandbox; the label is a JSON object with the test fields of one of its formats (humaneval: ``test``,
``entry_point``; mbpp: ``test_list``; lcb: ``tests``, ``fn_name``; kodcode: ``test``), the response is graded.
"""

from __future__ import annotations

import json
import os
import threading

_LOCK = threading.Lock()
_POOL = None
TIMEOUT_S = 10.0
MISSING_EXTRA = (
    "math grading needs the eval extra: pip install 'entropy-harness[eval]' "
    "(math-verify); harness.evals.math_grader could not be imported"
)


def _pool():
    global _POOL
    if _POOL is None:
        try:
            import math_verify  # noqa: F401  (the eval extra)

            from harness.evals.math_grader import MathGraderPool
        except ImportError as e:
            raise ImportError(f"{MISSING_EXTRA}: {e}") from e
        _POOL = MathGraderPool(workers=1, timeout_s=TIMEOUT_S).__enter__()  # persistent worker
    return _POOL


_SANDBOX = None
CODE_LABEL_HELP = (
    "code labels must be JSON objects with the test fields of an harness.evals.code_grader format "
    "(humaneval: test, entry_point; mbpp: test_list; lcb: tests, fn_name; kodcode: test)"
)


def reward_kind() -> str:
    """math or code, from the plugin config in the environment (math when absent)."""
    try:
        return json.loads(os.environ.get("HARNESS_OPENRLHF_PLUGIN", "{}")).get("reward", "math")
    except (ValueError, AttributeError):
        return "math"


def _sandbox():
    global _SANDBOX
    if _SANDBOX is None:
        from harness.evals.sandbox import Sandbox

        _SANDBOX = Sandbox(workers=1)
    return _SANDBOX


def grade_code(response: str, label) -> dict:
    from harness.evals.code_grader import grade_code_many

    item = json.loads(label) if isinstance(label, str) else label
    if not isinstance(item, dict):
        raise ValueError(CODE_LABEL_HELP)
    item = {**item, "response": response}
    item.setdefault("prompt", "")
    verdict = grade_code_many([item], _sandbox())[0]
    # a program that times out or fails is a wrong answer; only a sandbox/item error is a grading failure
    status = verdict["status"]
    return {
        "correct": verdict["correct"],
        "reason": "error" if status == "error" else status if status == "passed" else "wrong",
    }


def response_text(query: str, prompt: str) -> str:
    """The response part of OpenRLHF's decoded ``query`` (prompt + response, special tokens kept)."""
    query, prompt = query or "", prompt or ""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def grade_one(query: str, prompt: str, label) -> tuple[float, int]:
    """(reward, failure) for one sample; failure = 1 when grading itself failed (not a wrong answer)."""
    try:
        response = response_text(query, prompt)
        if reward_kind() == "code":
            verdict = grade_code(response, label)  # the sandbox is thread-safe
        else:
            with _LOCK:
                verdict = _pool().grade([(response, "" if label is None else str(label))])[0]
        reason = str(verdict.get("reason", "error"))
        return (1.0 if verdict.get("correct") else 0.0), int(reason.startswith("error") or reason == "timeout")
    except Exception as e:  # never raise into OpenRLHF: it would drop the sample silently
        _log_failure(e)
        return 0.0, 1


_FAILURES_LOGGED = 0


def _log_failure(e: BaseException) -> None:
    global _FAILURES_LOGGED
    if _FAILURES_LOGGED < 5:
        _FAILURES_LOGGED += 1
        print(f"[harness reward] grading failed, reward 0: {type(e).__name__}: {e}", flush=True)


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's reward hook: {"rewards", "scores", "extra_logs"}, one entry per query."""
    import torch

    rewards, failures = [], []
    for i, query in enumerate(queries or []):
        try:
            prompt = prompts[i] if prompts is not None and i < len(prompts) else ""
            label = labels[i] if labels is not None and i < len(labels) else None
        except Exception:
            prompt, label = "", None
        r, f = grade_one(query, prompt, label)
        rewards.append(r)
        failures.append(f)
    rewards_t = torch.tensor(rewards, dtype=torch.float32)
    return {
        "rewards": rewards_t,
        "scores": rewards_t.clone(),
        "extra_logs": {"reward/grading_failures": torch.tensor(failures, dtype=torch.float32)},
    }
