"""A stand-in for the bare GPU machine's python on this machine: this interpreter's site-packages minus the
packages that machine lacks (issue #17), as a folder of symlinks used with ``python -S`` (no site, no .pth).

The GPU machine promises torch, transformers, accelerate, safetensors, pytest, pandas, seaborn, pyyaml and tqdm
(and their dependencies); ABSENT are the packages the harness or its OpenRLHF path could import that it lacks.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

ABSENT = (
    "submitit",
    "cloudpickle",
    "math_verify",
    "latex2sympy2_extended",
    "antlr4",
    "antlr4_python3_runtime",
    "lm_eval",
    "datasets",
    "evaluate",
    "gguf",
    "wandb",
    "tensorboard",
    "tensorboard_data_server",
    "scipy",
    "sklearn",
    "scikit_learn",
    "pytest_timeout",
    "openrlhf",
    "deepspeed",
    "ray",
    "vllm",
    "flash_attn",
    "peft",
    "pylatexenc",
    "torchdata",
    "hjson",
    "pydantic",
    "pydantic_core",
    "aiohttp",
)


def _top_name(entry: str) -> str:
    """'math_verify-0.9.0.dist-info' -> 'math_verify'; 'scipy.libs' -> 'scipy'; 'six.py' -> 'six'."""
    for suffix in (".dist-info", ".egg-info", ".libs", ".py", ".pth"):
        if entry.endswith(suffix):
            entry = entry[: -len(suffix)]
            if suffix in (".dist-info", ".egg-info"):
                entry = entry.split("-")[0]
            break
    return entry.lower().replace("-", "_")


def build(dest: Path) -> Path:
    """Fill ``dest`` with symlinks to every site-packages entry except the ABSENT ones; returns ``dest``."""
    site = Path(sysconfig.get_paths()["purelib"])
    dest.mkdir(parents=True, exist_ok=True)
    for entry in os.listdir(site):
        if entry.endswith(".pth") or entry.startswith(("__editable__", "__pycache__")) or _top_name(entry) in ABSENT:
            continue
        link = dest / entry
        if not link.exists():
            link.symlink_to(site / entry)
    return dest
