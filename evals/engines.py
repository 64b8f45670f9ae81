"""Generation engines behind one interface: HF transformers (CPU/GPU, batched) and vLLM (GPU, lazy import).

``engine.generate(requests, protocol)`` takes ``Request(key, prompt)`` items, key = (problem id, sample index),
and yields ``(request, text)`` as results come (HF: each batch; vLLM: once its one ``generate`` is done), so the
caller can append each completion to disk at once. Prompts are chat-formatted with the tokenizer's chat template
when it has one (``chat=None`` = auto), else passed raw. ``engine.close()`` releases workers and devices.

Differences from the official scripts: sampling seeds are per batch (HF) / per problem request (vLLM) derived
from ``seed``, so a resumed run does not reproduce the exact samples an uninterrupted run would have drawn (the
distribution is the same).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.registry import Registry

from .chat import chat_format
from .suites import Protocol

ENGINES: Registry[type] = Registry("engine")


@dataclass(frozen=True)
class Request:
    key: tuple  # (problem id, sample index)
    prompt: str


class Engine:
    name = "base"

    def generate(self, requests: Sequence[Request], protocol: Protocol, seed: int = 0) -> Iterator[tuple[Request, str]]:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"engine": self.name}

    def close(self) -> None:
        """Release the engine's workers/devices (a no-op where there are none)."""


def split_model_path(model: str) -> tuple[str, dict]:
    """``dir`` / hub id -> (id, {}); ``dir/file.gguf`` -> (dir, {"gguf_file": "file.gguf"})."""
    if model.endswith(".gguf"):
        p = Path(model)
        if not p.is_file():
            raise FileNotFoundError(f"GGUF file {model} does not exist")
        return str(p.parent), {"gguf_file": p.name}
    return model, {}


def check_model_path(model: str) -> None:
    """A path-looking model that does not exist is a clear error (not a hub lookup)."""
    looks_local = model.startswith(("/", "./", "../", "~")) or os.path.exists(model)
    if looks_local and not os.path.exists(os.path.expanduser(model)):
        raise FileNotFoundError(f"model path {model} does not exist")
    if not looks_local and model.count("/") != 1:
        raise FileNotFoundError(f"model {model} is neither a local directory nor a hub id (org/name)")


@ENGINES.register("hf")
class HFEngine(Engine):
    """transformers ``generate`` with left padding; one row per (problem, sample)."""

    name = "hf"

    def __init__(
        self,
        model: str,
        batch_size: int = 8,
        device: str | None = None,
        dtype: str = "auto",
        chat: bool | None = None,
        model_obj=None,
        tokenizer=None,
        threads: int | None = None,
    ):
        import torch

        if threads:  # on a shared CPU box one thread is often several times faster than contended threads
            torch.set_num_threads(threads)
        from transformers import AutoModelForCausalLM

        self.model_id = model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        path, extra = split_model_path(model)
        if model_obj is None:
            check_model_path(model)
        try:
            from transformers import AutoTokenizer

            from harness.backends import load_tokenizer  # a tokenizer a backend saved in its own format, exactly

            own = None if (tokenizer or extra) else load_tokenizer(path)
            self.tokenizer = tokenizer or own or AutoTokenizer.from_pretrained(path, **extra)
        except OSError as e:
            raise FileNotFoundError(
                f"could not load the tokenizer of model {model}: {str(e).splitlines()[0]}. "
                "Pass a local HF model directory or a .gguf file (offline: no hub access)"
            ) from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if model_obj is None:
            torch_dtype = {
                "auto": (torch.bfloat16 if self.device == "cuda" else torch.float32),
                "float32": torch.float32,
                "bfloat16": torch.bfloat16,
                "float16": torch.float16,
            }[dtype]
            model_obj = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **extra)
        self.model = model_obj.to(self.device).eval()
        self.batch_size = max(1, batch_size)
        self.chat = chat

    def describe(self) -> dict:
        return {"engine": self.name, "model": self.model_id, "device": self.device, "batch_size": self.batch_size}

    def generate(self, requests, protocol, seed=0):
        import torch

        reqs = list(requests)
        for b in range(0, len(reqs), self.batch_size):
            batch = reqs[b : b + self.batch_size]
            texts = [chat_format(self.tokenizer, r.prompt, self.chat) for r in batch]
            enc = self.tokenizer(
                texts, return_tensors="pt", padding=True, add_special_tokens=not self._templated(texts)
            )
            enc = {k: v.to(self.device) for k, v in enc.items()}
            kwargs = dict(max_new_tokens=protocol.max_tokens, pad_token_id=self.tokenizer.pad_token_id)
            if protocol.temperature > 0:
                kwargs.update(do_sample=True, temperature=protocol.temperature, top_p=protocol.top_p, top_k=0)
                torch.manual_seed(seed * 1_000_003 + b)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            with torch.no_grad():
                out = self.model.generate(**enc, **kwargs)
            new = out[:, enc["input_ids"].shape[1] :]
            for r, row in zip(batch, new):
                yield r, self.tokenizer.decode(row, skip_special_tokens=True)

    def _templated(self, texts: list[str]) -> bool:
        bos = self.tokenizer.bos_token
        return bool(bos) and all(t.startswith(bos) for t in texts)


@ENGINES.register("vllm")
class VLLMEngine(Engine):
    """vLLM offline inference (GPU; ``pip install 'entropy-harness[gpu]'``, imported only when used).

    One ``generate`` per call over all requests, ``SamplingParams(n=k)`` per problem (``vllm_runner.plan``), and
    ``data_parallel_size`` engines of ``tensor_parallel_size`` GPUs each: 1 runs in this process; more run one
    spawned process per GPU group (``CUDA_VISIBLE_DEVICES`` per group), kept for the engine's lifetime, the
    requests split between them and merged back in request order. If a group fails, the other groups'
    results are still yielded (and written by the caller) before the error is raised.

    ``runtime`` is the one seam to vLLM (``vllm_runner.Runtime``; default the real ``vllm.LLM`` and
    ``vllm.SamplingParams``): tests pass a stand-in because vLLM cannot run without a GPU."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        data_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        chat: bool | None = None,
        seed: int = 0,
        dtype: str = "auto",
        runtime=None,
    ):
        import importlib.util

        from . import vllm_runner

        self.runtime = runtime or vllm_runner.VLLM_RUNTIME
        if self.runtime.package and importlib.util.find_spec(self.runtime.package) is None:
            raise ValueError(
                "--engine vllm needs the vllm package (pip install 'entropy-harness[gpu]'): "
                f"No module named {self.runtime.package!r}"
            )
        for flag, v in (("tensor-parallel-size", tensor_parallel_size), ("data-parallel-size", data_parallel_size)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"--{flag} {v}: must be an integer >= 1")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"--gpu-memory-utilization {gpu_memory_utilization}: allowed 0 < value <= 1")
        if max_model_len is not None and max_model_len < 1:
            raise ValueError(f"--max-model-len {max_model_len}: must be >= 1")
        check_model_path(model)
        path, extra = split_model_path(model)
        self.llm_kwargs = dict(
            model=model if extra else path,
            tensor_parallel_size=tensor_parallel_size,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
        )
        if max_model_len:
            self.llm_kwargs["max_model_len"] = max_model_len
        self.model_id, self.chat, self.data_parallel_size = model, chat, data_parallel_size
        self._llm = self._pool = None
        if data_parallel_size == 1:
            self._llm = self.runtime.make_llm(**self.llm_kwargs)
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            installed = None
            if visible is None:
                from harness.provenance import gpu_models

                installed = len(gpu_models())
            devices = vllm_runner.device_groups(data_parallel_size, tensor_parallel_size, visible, installed)
            self._pool = vllm_runner.WorkerPool(self.runtime, self.llm_kwargs, devices, chat)
            self._finalizer = weakref.finalize(self, self._pool.close)
        self._closed = False

    def describe(self) -> dict:
        return {"engine": self.name, "model": self.model_id}

    def generate(self, requests, protocol, seed=0):
        from . import vllm_runner

        if self._closed:
            raise RuntimeError("this vLLM engine was closed")
        reqs = list(requests)
        prompts = vllm_runner.plan(reqs, seed, sampled=protocol.temperature > 0)
        if self._pool is None:
            texts = vllm_runner.run_group(self._llm, self.runtime, prompts, protocol, self.chat)
            yield from vllm_runner.ordered_results(reqs, prompts, dict(enumerate(texts)))
            return
        shares = vllm_runner.assign_groups(prompts, self.data_parallel_size)
        results, errors = self._pool.run([[prompts[i] for i in share] for share in shares], protocol)
        texts = {i: t for g, share in enumerate(shares) if g in results for i, t in zip(share, results[g])}
        yield from vllm_runner.ordered_results(reqs, prompts, texts)  # what finished is kept even if a group failed
        if errors:
            detail = "\n".join(f"{self._pool.group_name(g)}:\n{tb}" for g, tb in sorted(errors.items()))
            raise RuntimeError(
                f"{len(errors)} of {self.data_parallel_size} vLLM data-parallel groups failed:\n{detail}"
            )

    def close(self) -> None:
        if self._pool is not None:
            self._finalizer()
        self._llm = self._pool = None
        self._closed = True


def engine_tokenizer(engine):
    """The tokenizer whose chat template formats prompts for ``engine``: its own (hf), else the model's (vllm):
    a backend's own tokenizer format first, as the hf engine loads it, then ``AutoTokenizer``."""
    tok = getattr(engine, "tokenizer", None)
    if tok is not None:
        return tok
    from transformers import AutoTokenizer

    from harness.backends import load_tokenizer

    path, extra = split_model_path(engine.model_id)
    return (None if extra else load_tokenizer(path)) or AutoTokenizer.from_pretrained(path, **extra)


def make_engine(name: str, model: str, **kw) -> Engine:
    cls = ENGINES.get(name)
    return cls(model, **{k: v for k, v in kw.items() if v is not None})


def engine_names() -> Iterable[str]:
    return ENGINES.names()
