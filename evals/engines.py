"""Generation engines behind one interface: HF transformers (CPU/GPU, batched) and vLLM (GPU, lazy import).

``engine.generate(requests, protocol)`` takes ``Request(key, prompt)`` items and yields ``(request, text)``
as batches finish, so the caller can append each completion to disk at once. Prompts are chat-formatted with
the tokenizer's chat template when it has one (``chat=None`` = auto), else passed raw.

Differences from the official scripts: sampling seeds are per batch (HF) / per request (vLLM) derived from
``seed``, so a resumed run does not reproduce the exact samples an uninterrupted run would have drawn (the
distribution is the same).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.registry import Registry

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


def chat_format(tokenizer, prompt: str, chat: bool | None) -> str:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is False or (chat is None and not has_template):
        return prompt
    if not has_template:
        raise ValueError("--chat was requested but the tokenizer has no chat template")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


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
            from harness.backends.pocket.tokenizer import load_tokenizer

            self.tokenizer = tokenizer or load_tokenizer(path, **extra)  # a saved pocket tokenizer exactly
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
    """vLLM offline inference (GPU). ``pip install vllm`` (extra ``gpu``); imported only when used."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        chat: bool | None = None,
        chunk: int = 512,
        seed: int = 0,
        dtype: str = "auto",
    ):
        try:
            from vllm import LLM
        except ImportError as e:
            raise ValueError(
                f"--engine vllm needs the vllm package (pip install 'entropy-harness[gpu]'): {e}"
            ) from None
        path, extra = split_model_path(model)
        kw = dict(
            model=model if extra else path,
            tensor_parallel_size=tensor_parallel_size,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
        )
        if max_model_len:
            kw["max_model_len"] = max_model_len
        self.llm = LLM(**kw)
        self.tokenizer = self.llm.get_tokenizer()
        self.model_id, self.chat, self.chunk = model, chat, chunk

    def describe(self) -> dict:
        return {"engine": self.name, "model": self.model_id}

    def generate(self, requests, protocol, seed=0):
        from vllm import SamplingParams

        reqs = list(requests)
        for b in range(0, len(reqs), self.chunk):
            batch = reqs[b : b + self.chunk]
            texts = [chat_format(self.tokenizer, r.prompt, self.chat) for r in batch]
            params = [
                SamplingParams(
                    n=1,
                    temperature=protocol.temperature,
                    top_p=protocol.top_p,
                    max_tokens=protocol.max_tokens,
                    seed=None if protocol.temperature == 0 else _request_seed(seed, r.key),
                )
                for r in batch
            ]
            outs = self.llm.generate(texts, params, use_tqdm=False)
            for r, o in zip(batch, outs):
                yield r, o.outputs[0].text


def _request_seed(seed: int, key: tuple) -> int:
    """Deterministic per-request seed (``hash()`` of strings changes between processes)."""
    import zlib

    return zlib.crc32(repr((seed,) + tuple(key)).encode()) & 0x7FFFFFFF


def make_engine(name: str, model: str, **kw) -> Engine:
    cls = ENGINES.get(name)
    return cls(model, **{k: v for k, v in kw.items() if v is not None})


def engine_names() -> Iterable[str]:
    return ENGINES.names()
