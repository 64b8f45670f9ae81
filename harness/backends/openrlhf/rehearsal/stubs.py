"""``sys.modules`` stand-ins for ``flash_attn`` and ``vllm`` so OpenRLHF 0.11.2 imports on a CPU machine.

Only for tests and CPU tooling (``HARNESS_OPENRLHF_CPU_STUBS=1`` makes the Ray hook install them in workers) and
the CPU rehearsal (``harness.backends.openrlhf.rehearsal.cpu`` installs them, then puts its CPU engine in
vLLM's engine classes with a version upstream's engine accepts).
The stubs carry a ``__spec__`` (transformers calls ``importlib.util.find_spec("flash_attn")``); anything that
would really need the library raises ``RuntimeError`` naming the stub. Never install them on a GPU box.
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
            k: _unavailable(f"flash_attn.bert_padding.{k}")
            for k in ("index_first_axis", "pad_input", "rearrange", "unpad_input")
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
