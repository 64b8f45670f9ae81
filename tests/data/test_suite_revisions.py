"""Eval suites pin the hub commit they load (datasets.load_dataset(..., revision=))."""

import os
import re
import subprocess
import sys

import pytest

from harness.evals import suites

HUB_SUITES = ["aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench", "omnimath", "humaneval_plus",
              "mbpp_plus", "livecodebench", "kodcode"]  # fmt: skip
PINNED = {
    "aime25": "563bb8404243c5f09de6ec262f2db674fe5bce9b",
    "math500": "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
    "humaneval_plus": "d32357cf319e50e9c8d8dab5ea876c72b0fd321b",
    "livecodebench": "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",
}


def test_every_hub_suite_declares_its_revision():
    for name in HUB_SUITES:
        rev = suites.get_suite(name).revision
        assert rev == PINNED.get(name, suites.REVISION_TO_FILL), name
        assert rev is None or re.fullmatch(r"[0-9a-f]{40}", rev), name


def test_the_hub_load_passes_the_revision(tmp_path):
    """The real datasets call, offline: its error names the pinned commit; an unpinned suite says so."""
    pytest.importorskip("datasets")
    code = (
        "from harness.evals.suites import get_suite\n"
        "for name in ('math500', 'amc23'):\n"
        "    try:\n"
        "        get_suite(name).load()\n"
        "    except FileNotFoundError as e:\n"
        "        print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "HuggingFaceH4/MATH-500 at revision 6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be split 'test'" in out.stdout
    assert "could not load the dataset math-ai/amc23 split 'test'" in out.stdout
    assert "warning: suite amc23 loads math-ai/amc23 at the hub's main (no pinned revision)" in out.stderr
