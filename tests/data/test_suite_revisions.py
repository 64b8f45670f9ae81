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
    "aime24": "8d88b2876a82a080e2f172cc9b25d0d9d2cb4792",
    "aime25": "563bb8404243c5f09de6ec262f2db674fe5bce9b",
    "amc23": "80815d37005feb82cd7f8fbc6901d5d3eff43057",
    "math500": "6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
    "minerva": "ee46ddc498933b1977577953250ca5c66be64f96",
    "olympiadbench": "91184b52131e7fc9455fef848035173aea8cc01a",
    "humaneval_plus": "d32357cf319e50e9c8d8dab5ea876c72b0fd321b",
    "mbpp_plus": "b2d74c91837c3f2a20c1299ae98133cbe7cfa077",
    "livecodebench": "0fe84c3912ea0c4d4a78037083943e8f0c4dd505",
}
UNPINNED = {"omnimath", "kodcode"}  # no commit found offline (docs/data.md says how to fill one)


def test_every_hub_suite_declares_its_revision():
    for name in HUB_SUITES:
        rev = suites.get_suite(name).revision
        assert rev == PINNED.get(name, suites.REVISION_TO_FILL), name
        assert rev is None or re.fullmatch(r"[0-9a-f]{40}", rev), name
    assert {name for name in HUB_SUITES if suites.get_suite(name).revision is None} == UNPINNED


def test_the_hub_load_passes_the_revision(tmp_path):
    """The real datasets call, offline: its error names the pinned commit; an unpinned suite says so."""
    pytest.importorskip("datasets")
    code = (
        "from harness.evals.suites import get_suite\n"
        "for name in ('math500', 'olympiadbench', 'omnimath'):\n"
        "    try:\n"
        "        get_suite(name).load()\n"
        "    except FileNotFoundError as e:\n"
        "        print(e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "HuggingFaceH4/MATH-500 at revision 6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be split 'test'" in out.stdout
    olympiad = "Hothan/OlympiadBench (config OE_TO_maths_en_COMP) at revision 91184b52131e7fc9455fef848035173aea8cc01a"
    assert olympiad in out.stdout
    assert "could not load the dataset KbsdJames/Omni-MATH split 'test'" in out.stdout
    assert "warning: suite omnimath loads KbsdJames/Omni-MATH at the hub's main (no pinned revision)" in out.stderr
