"""The paper's Table 2 (results/reference/) and suite-name matching between the paper and harness suites."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "reference"
REFERENCES = {"paper": "paper_table2.csv"}
PAPER_SUITES = ["aime24", "aime25", "amc", "math500", "omni_math", "olympiadbench", "minerva"]
PAPER_DISPLAY = {
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc": "AMC",
    "math500": "MATH-500",
    "omni_math": "OMNI-MATH",
    "olympiadbench": "OlympiadBench",
    "minerva": "Minerva",
}
# other spellings of the paper's suites that evals may use -> the paper's ids
_ALIASES = {
    "amc23": "amc",
    "math": "math500",
    "omnimath": "omni_math",
    "olympiad": "olympiadbench",
    "olympiadbenchmath": "olympiadbench",
    "minervamath": "minerva",
}


def canonical_suite(name: str) -> str:
    """Map ``MATH-500``/``math_500``/``math500`` to one id so run suites line up with the paper's columns."""
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for pid in PAPER_SUITES:
        if key == re.sub(r"[^a-z0-9]", "", pid):
            return pid
    return _ALIASES.get(key, str(name))


def load_reference(name: str = "paper", directory: Path | None = None) -> pd.DataFrame:
    """The reference table as rows (model, model_params, method) with suite columns and ``avg`` (percent)."""
    if name not in REFERENCES:
        raise ValueError(f"unknown reference {name!r}; available: {', '.join(REFERENCES)}")
    path = (directory or REFERENCE_DIR) / REFERENCES[name]
    if not path.is_file():
        raise FileNotFoundError(f"reference table {path} is missing (it ships with the repository)")
    return pd.read_csv(path, comment="#")


def load_protocol(directory: Path | None = None) -> pd.DataFrame:
    """Per-suite protocol of the paper's evaluation, with ``eval_rows`` = the weight in the paper's Avg."""
    return pd.read_csv((directory or REFERENCE_DIR) / "paper_eval_protocol.csv", comment="#")
