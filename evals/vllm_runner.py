"""The vLLM engine's logic without vLLM: request planning, data-parallel groups, the worker pool, the one seam.

``harness.evals.engines.VLLMEngine`` is thin; everything it decides is here and runs on a CPU:

* ``plan(requests, seed, sampled)``: the engine gets one ``Request`` per (problem, sample) still missing (a
  resumed eval asks only for those). Requests of one problem and prompt become ONE vLLM request with
  ``SamplingParams(n=k)`` (AIME avg@32: 30 requests of n=32, not 960 of n=1); its k outputs serve the k sample
  indices in order. Greedy requests stay one per sample (n=1, no seed).
* ``assign_groups(prompts, n_groups)``: data parallelism splits the vLLM requests over the groups, each to the
  group with the fewest samples so far (ties: the lowest group), so equal-n requests go round-robin and a
  benchmark ordered by difficulty is spread evenly; results are merged back in the engine's request order.
* ``device_groups(dp, tp)``: the ``CUDA_VISIBLE_DEVICES`` of each group, ``tp`` consecutive GPUs of those visible
  (or installed) each; too few GPUs is a one-line error before anything starts.
* ``WorkerPool``: one process per group (spawned, ``CUDA_VISIBLE_DEVICES`` set before it starts), each holding
  one engine for the pool's lifetime (all suites of an eval), each running ONE ``generate`` over its share.
* ``Runtime``: how a worker reaches vLLM (``make_llm(**llm_kwargs)``, ``sampling_params(**kw)``). ``VLLM_RUNTIME``
  is the real one; it is the single seam a test replaces, because vLLM cannot run without a GPU.

Seeds: each sampled vLLM request gets ``request_seed(seed, (problem id, first sample index))`` (crc32, stable
across processes); vLLM derives the n samples from it. A resumed eval asks for the missing samples under a
seed keyed by the first missing index, so it does not redraw what an uninterrupted run would have drawn (the
distribution is the same).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import traceback
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Runtime:
    """The calls into vLLM. ``make_llm(**kw)`` returns an object with ``get_tokenizer()`` and
    ``generate(prompts, params_list, use_tqdm=False)`` -> one output per prompt, each with ``.outputs`` (n items
    with ``.text`` and ``.index``); ``sampling_params(**kw)`` builds what ``generate`` takes. Both must be
    module-level callables (workers receive them pickled)."""

    make_llm: Callable[..., Any]
    sampling_params: Callable[..., Any]
    package: str | None = None  # checked importable before anything starts (the real runtime: "vllm")


def _vllm_llm(**kw):
    from vllm import LLM

    return LLM(**kw)


def _vllm_sampling_params(**kw):
    from vllm import SamplingParams

    return SamplingParams(**kw)


VLLM_RUNTIME = Runtime(_vllm_llm, _vllm_sampling_params, package="vllm")


@dataclass(frozen=True)
class PromptRequest:
    """One vLLM request: a prompt, the engine requests its outputs serve (output j -> requests[j]), its seed."""

    prompt: str
    requests: tuple
    seed: int | None

    @property
    def n(self) -> int:
        return len(self.requests)


def request_seed(seed: int, key: tuple) -> int:
    """Deterministic per-request seed (``hash()`` of strings changes between processes)."""
    return zlib.crc32(repr((seed,) + tuple(key)).encode()) & 0x7FFFFFFF


def plan(requests: Sequence, seed: int, sampled: bool) -> list[PromptRequest]:
    """Group the engine's (problem, sample) requests into vLLM requests (see the module docstring)."""
    groups: dict[tuple, list] = {}
    for r in requests:
        groups.setdefault((r.key[0], r.prompt), []).append(r)
    out = []
    for (_pid, prompt), reqs in groups.items():
        if sampled:
            out.append(PromptRequest(prompt, tuple(reqs), request_seed(seed, reqs[0].key)))
        else:
            out += [PromptRequest(prompt, (r,), None) for r in reqs]
    return out


def assign_groups(prompts: Sequence[PromptRequest], n_groups: int) -> list[list[int]]:
    """Indices of ``prompts`` per group: each to the group with the fewest samples so far (ties: lowest)."""
    if n_groups < 1:
        raise ValueError(f"need at least one data-parallel group, got {n_groups}")
    load = [0] * n_groups
    shares: list[list[int]] = [[] for _ in range(n_groups)]
    for i, p in enumerate(prompts):
        g = min(range(n_groups), key=lambda j: (load[j], j))
        shares[g].append(i)
        load[g] += p.n
    return shares


def device_groups(dp: int, tp: int, visible: str | None = None, installed: int | None = None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of each of ``dp`` groups of ``tp`` GPUs, from the visible list (else the
    ``installed`` count); fewer GPUs than dp x tp is an error naming both."""
    need = dp * tp
    if visible is not None:
        ids = [x.strip() for x in visible.split(",") if x.strip()]
        have = f"CUDA_VISIBLE_DEVICES={visible!r} lists {len(ids)}"
    else:
        ids = [str(i) for i in range(installed or 0)]
        have = f"this machine has {installed or 0} NVIDIA GPU(s) (set CUDA_VISIBLE_DEVICES if that is wrong)"
    if len(ids) < need:
        raise ValueError(
            f"--data-parallel-size {dp} x --tensor-parallel-size {tp} needs {need} GPUs, but {have}; lower one of them"
        )
    return [",".join(ids[g * tp : (g + 1) * tp]) for g in range(dp)]


def texts_of(prompt: PromptRequest, output) -> list[str]:
    """The n texts of one vLLM output in sample order (by ``CompletionOutput.index``)."""
    outs = list(output.outputs)
    if len(outs) != prompt.n:
        raise RuntimeError(f"vLLM returned {len(outs)} outputs for a request of n={prompt.n}")
    outs.sort(key=lambda o: getattr(o, "index", 0))
    return [o.text for o in outs]


def run_group(llm, runtime: Runtime, prompts: Sequence[PromptRequest], protocol, chat: bool | None) -> list[list]:
    """ONE ``generate`` over ``prompts``; returns each prompt's n texts."""
    from .chat import chat_format

    if not prompts:
        return []
    tokenizer = llm.get_tokenizer()
    texts = [chat_format(tokenizer, p.prompt, chat) for p in prompts]
    params = [
        runtime.sampling_params(
            n=p.n,
            temperature=protocol.temperature,
            top_p=protocol.top_p,
            max_tokens=protocol.max_tokens,
            seed=p.seed,
        )
        for p in prompts
    ]
    outputs = list(llm.generate(texts, params, use_tqdm=False))
    if len(outputs) != len(prompts):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
    return [texts_of(p, o) for p, o in zip(prompts, outputs)]


def ordered_results(requests: Sequence, prompts: Sequence[PromptRequest], texts: dict[int, list]) -> Iterator:
    """(request, text) in the order of ``requests`` for every prompt index present in ``texts``."""
    by_key = {}
    for i, t in texts.items():
        for r, text in zip(prompts[i].requests, t):
            by_key[r.key] = (r, text)
    for r in requests:
        if r.key in by_key:
            yield by_key[r.key]


# ---------------------------------------------------------------------------------------- worker pool


@contextlib.contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _serve(conn, devices: str, runtime: Runtime, llm_kwargs: dict, chat) -> None:
    """A worker: build one engine on ``devices``, then answer ("generate", prompts, protocol) until "stop"."""
    os.environ["CUDA_VISIBLE_DEVICES"] = devices  # already set by the parent; CUDA initialises lazily
    try:
        llm = runtime.make_llm(**llm_kwargs)
    except BaseException:  # noqa: BLE001 - reported to the parent with the traceback
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        _, prompts, protocol = msg
        try:
            conn.send(("done", run_group(llm, runtime, prompts, protocol, chat)))
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))


class WorkerPool:
    """One spawned process per data-parallel group, each holding one engine until ``close()``."""

    def __init__(self, runtime: Runtime, llm_kwargs: dict, devices: Sequence[str], chat: bool | None):
        ctx = mp.get_context("spawn")  # never fork a process that may hold CUDA state
        self.devices = list(devices)
        self.procs, self.conns = [], []
        try:
            for g, dev in enumerate(self.devices):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_serve, args=(child, dev, runtime, llm_kwargs, chat), name=f"harness-vllm-dp{g}")
                with _env("CUDA_VISIBLE_DEVICES", dev):
                    p.start()
                child.close()
                self.procs.append(p)
                self.conns.append(parent)
            for g in range(len(self.devices)):
                kind, payload = self._recv(g)
                if kind != "ready":
                    raise RuntimeError(f"{self.group_name(g)} failed to start:\n{payload}")
        except BaseException:
            self.close()
            raise

    def group_name(self, g: int) -> str:
        return f"vLLM engine of data-parallel group {g} (CUDA_VISIBLE_DEVICES={self.devices[g]})"

    def _recv(self, g: int) -> tuple[str, Any]:
        try:
            return self.conns[g].recv()
        except (EOFError, OSError):
            self.procs[g].join(5)
            return "error", f"the worker process exited (exit code {self.procs[g].exitcode})"

    def run(self, shares: Sequence[Sequence[PromptRequest]], protocol) -> tuple[dict[int, list], dict[int, str]]:
        """Send each group its share (empty shares are skipped); returns (texts per group, errors per group)."""
        pending = {}
        errors: dict[int, str] = {}
        for g, share in enumerate(shares):
            if not share:
                continue
            try:
                self.conns[g].send(("generate", list(share), protocol))
                pending[self.conns[g]] = g
            except (OSError, ValueError) as e:
                errors[g] = f"could not reach the worker: {e}"
        results: dict[int, list] = {}
        while pending:
            for conn in wait(list(pending)):
                g = pending.pop(conn)
                kind, payload = self._recv(g)
                if kind == "done":
                    results[g] = payload
                else:
                    errors[g] = payload
        return results, errors

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("stop",))
        for p in self.procs:
            p.join(STOP_TIMEOUT_S)
            if p.is_alive():
                p.terminate()
                p.join(5)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
