"""STAND-IN for vLLM, the one stand-in of the eval tests: vLLM cannot run here (no GPU; not installed).

It enters only through the engine's documented seam, ``VLLMEngine(..., runtime=STAND_IN)``
(``harness.evals.vllm_runner.Runtime``), and mirrors the vLLM API facts the engine relies on (from vLLM's docs):
``LLM(model=, tensor_parallel_size=, seed=, gpu_memory_utilization=, max_model_len=, dtype=)``,
``get_tokenizer()``, ``generate(prompts, [SamplingParams], use_tqdm=False)`` returning one ``RequestOutput`` per
prompt in prompt order whose ``outputs`` are n ``CompletionOutput(index, text)`` (returned here in reverse index
order, which the engine must undo).

Text: for a prompt holding ``a+b?`` or ``a-b?``, output j is ``\\boxed{a±b}`` when j is even and one more when j
is odd (so avg@k = 1/2 for even k, by hand); the seed and index are in the text. Every ``generate`` call is
appended to ``$VLLM_STAND_IN_LOG`` (JSON lines: pid, CUDA_VISIBLE_DEVICES, the LLM kwargs, prompts, params).
``$VLLM_STAND_IN_FAIL_ON`` = a CUDA_VISIBLE_DEVICES value makes ``generate`` fail there;
``$VLLM_STAND_IN_FAIL_START`` = one makes ``LLM(...)`` fail there.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

from harness.evals.vllm_runner import Runtime


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str


@dataclass
class RequestOutput:
    prompt: str
    outputs: list


class Tokenizer:
    chat_template = None


class LLM:
    def __init__(self, **kw):
        fail = os.environ.get("VLLM_STAND_IN_FAIL_START")
        if fail is not None and fail == os.environ.get("CUDA_VISIBLE_DEVICES"):
            raise RuntimeError(f"stand-in engine start failure on GPUs {os.environ.get('CUDA_VISIBLE_DEVICES')}")
        self.kwargs = kw

    def get_tokenizer(self):
        return Tokenizer()

    def generate(self, prompts, params, use_tqdm=True):
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        log = os.environ.get("VLLM_STAND_IN_LOG")
        if log:
            with open(log, "a") as f:
                entry = {
                    "pid": os.getpid(),
                    "devices": devices,
                    "llm": self.kwargs,
                    "prompts": list(prompts),
                    "params": [asdict(p) for p in params],
                }
                f.write(json.dumps(entry) + "\n")
        fail = os.environ.get("VLLM_STAND_IN_FAIL_ON")
        if fail is not None and fail == devices:
            raise RuntimeError(f"stand-in generate failure on GPUs {devices}")
        return [
            RequestOutput(p, [CompletionOutput(j, answer(p, sp.seed, j)) for j in reversed(range(sp.n))])
            for p, sp in zip(prompts, params)
        ]


def answer(prompt: str, seed, j: int) -> str:
    m = re.search(r"(\d+)\s*([+-])\s*(\d+)\?", prompt)
    value = (int(m[1]) + int(m[3]) if m[2] == "+" else int(m[1]) - int(m[3])) if m else 0
    return f"[seed={seed} i={j}] \\boxed{{{value + (j % 2)}}}"


def make_llm(**kw):
    return LLM(**kw)


def sampling_params(**kw):
    return SamplingParams(**kw)


STAND_IN = Runtime(make_llm, sampling_params)
