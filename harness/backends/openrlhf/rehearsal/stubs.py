"""``sys.modules`` stand-ins for ``flash_attn`` and ``vllm`` so OpenRLHF 0.11.2 imports on a CPU machine.

Only for tests and CPU tooling (``HARNESS_OPENRLHF_CPU_STUBS=1`` makes the Ray hook install them in workers) and
the CPU rehearsal (``harness.backends.openrlhf.rehearsal.cpu`` installs them, then puts its CPU engine in
vLLM's engine classes with a version upstream's engine accepts).
The stubs carry a ``__spec__`` (transformers calls ``importlib.util.find_spec("flash_attn")``); anything that
would really need the library raises ``RuntimeError`` naming the stub. ``flash_attn.bert_padding``'s four helpers
are plain tensor indexing, used by OpenRLHF's sample packing around the model: they are given here in torch (as
flash-attn 2.8.3 defines them), so packed micro-batches run on a CPU. Never install them on a GPU box.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


def _unavailable(name: str):
    def fail(*_a, **_k):
        raise RuntimeError(f"{name} is a CPU test stub (harness.backends.openrlhf.rehearsal.stubs); it cannot run here")

    return fail


def _unpad_input(hidden_states, attention_mask, unused_mask=None):
    """``flash_attn.bert_padding.unpad_input``: the rows' valid positions flattened, with their indices,
    cumulative lengths, longest length and used lengths."""
    import torch
    import torch.nn.functional as F

    masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = masks.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, int(seqlens.max()), attention_mask.sum(dim=-1, dtype=torch.int32)


def _pad_input(hidden_states, indices, batch, seqlen):
    """``flash_attn.bert_padding.pad_input``: scatter the flat rows back to (batch, seqlen, ...), zeros elsewhere."""
    import torch

    out = torch.zeros(batch * seqlen, *hidden_states.shape[1:], dtype=hidden_states.dtype, device=hidden_states.device)
    return out.index_put((indices,), hidden_states).reshape(batch, seqlen, *hidden_states.shape[1:])


def _rearrange(*args, **kwargs):
    from einops import rearrange  # what flash_attn.bert_padding re-exports (an OpenRLHF dependency)

    return rearrange(*args, **kwargs)


class _SamplingParams:
    """Keeps the keyword arguments, like vllm.SamplingParams, for code that only builds one."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
    mod.__harness_stub__ = True
    sys.modules[name] = mod
    return mod


def install() -> list[str]:
    """Install the stubs for modules that are not importable for real; returns the names stubbed."""
    stubbed = []
    specs = {
        "flash_attn": {},
        "flash_attn.utils": {},  # no __path__: flash_attn.ops.* raises ImportError -> OpenRLHF's torch fallback
        "flash_attn.bert_padding": {
            "index_first_axis": lambda x, indices: x[indices],
            "pad_input": _pad_input,
            "rearrange": _rearrange,
            "unpad_input": _unpad_input,
        },
        "flash_attn.utils.distributed": {"all_gather": _unavailable("flash_attn.utils.distributed.all_gather")},
        "vllm": {
            "__version__": "0.0.0+harness.stub",  # a valid version string (TRL parses it)
            "SamplingParams": _SamplingParams,
            "AsyncEngineArgs": _unavailable("vllm.AsyncEngineArgs"),
            "LLM": _unavailable("vllm.LLM"),
        },
        "vllm.inputs": {"TokensPrompt": dict},
        "vllm.utils": {"random_uuid": lambda: "harness-stub"},
    }
    for name, attrs in specs.items():
        top = name.split(".")[0]
        if name in sys.modules:
            continue
        if top not in stubbed and top in sys.modules and not getattr(sys.modules[top], "__harness_stub__", False):
            continue  # the real package is already imported
        if top not in stubbed and top not in sys.modules:
            try:
                if importlib.util.find_spec(top) is not None:
                    continue  # really installed (GPU box): never shadow it
            except (ImportError, ValueError):
                pass
        _module(name, **attrs)
        if top not in stubbed:
            stubbed.append(top)
    return stubbed


def is_stub(module_name: str) -> bool:
    mod = sys.modules.get(module_name)
    return bool(mod is not None and getattr(mod, "__harness_stub__", False))
