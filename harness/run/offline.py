"""The environment of a job that reads only staged inputs (``harness stage``, a sweep's ``stage_dir``).

Compute nodes are usually offline. A staged sweep's jobs run with the hub switched off (``HF_HUB_OFFLINE``,
``HF_DATASETS_OFFLINE``, ``TRANSFORMERS_OFFLINE``) and ``HF_HUB_CACHE`` pointing at the stage's hub cache, so a
hub id such as ``Qwen/Qwen2.5-7B`` resolves to the staged snapshot without a change to the run config (run ids
stay); ``HARNESS_STAGE_DIR`` names the stage for the files rendered there once (the in-loop eval sets).

Layout of a stage directory (docs/gpu.md "Stage the inputs"):

    <stage>/manifest.json        every staged input: kind, name, source, revision, files with bytes and sha256
    <stage>/hub/                 a Hugging Face hub cache (models--<org>--<name>/refs/main, snapshots/<rev>/...)
    <stage>/suites/<suite>.jsonl eval suite rows in the hub's fields (every staged cell's eval.data_dir)
    <stage>/<backend files>      files a backend renders once for every run (e.g. evalsets/<key>.jsonl)
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

STAGE_ENV = "HARNESS_STAGE_DIR"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
HUB_CACHE_ENV = "HF_HUB_CACHE"
PASSED_ON = (*OFFLINE, HUB_CACHE_ENV)  # besides HARNESS_*: what a launcher hands every worker it starts
MANIFEST = "manifest.json"
HUB_DIR = "hub"
SUITES_DIR = "suites"


def job_env(stage_dir: str | os.PathLike) -> dict[str, str]:
    """The variables a job of a sweep staged in ``stage_dir`` runs with."""
    stage = str(Path(stage_dir).absolute())
    return {**OFFLINE, HUB_CACHE_ENV: str(Path(stage) / HUB_DIR), STAGE_ENV: stage}


def setup_line(stage_dir: str | os.PathLike) -> str:
    """``export ...`` of :func:`job_env`, for the job script (a sweep's ``resources.setup``)."""
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in job_env(stage_dir).items())


def stage_dir_of_env(env=os.environ) -> Path | None:
    """The stage this process was started for (None outside a staged job)."""
    value = env.get(STAGE_ENV)
    return Path(value) if value else None
