"""Training data for the GPU path: ``harness data prepare`` and ``harness data check``.

    from harness.data import prepare, check_training_file
    prepare("dapo-math-17k", "data/", source="hub")        # -> data/dapo-math-17k.jsonl + .manifest.json
    check_training_file("data/dapo-math-17k.jsonl")       # TrainingDataError (a ValueError) when unusable

Sources: ``dapo-math-17k`` and ``eurus-2-rl-math`` (harness/data/sources.py); small files in each source's hub
schema ship in ``harness/data/samples/`` (``sample_path(name)``). docs/data.md has the details.
"""

from .check import CheckSummary, TrainingDataError, check_training_file
from .pipeline import manifest_of, output_paths, prepare
from .sources import SAMPLES_DIR, SOURCES, get_source

RAW_DAPO_PROMPTS = SAMPLES_DIR / "dapo-math-17k-raw-prompts.jsonl"


def sample_path(name: str):
    """The shipped sample of source ``name`` (parquet in the hub schema)."""
    return get_source(name).sample


def list_sources() -> list[str]:
    return SOURCES.names()


__all__ = [
    "CheckSummary",
    "RAW_DAPO_PROMPTS",
    "SAMPLES_DIR",
    "TrainingDataError",
    "check_training_file",
    "list_sources",
    "manifest_of",
    "output_paths",
    "prepare",
    "sample_path",
]
