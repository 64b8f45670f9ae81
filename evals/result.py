"""One eval suite's result, as every backend and `harness eval` write it (docs/contracts.md §4)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class SuiteResult:
    """One eval suite's result (docs/contracts.md §4); ``primary`` names the leaderboard metric."""

    suite: str
    n_problems: int | None  # None when the backend cannot know it (never a made-up number)
    n_samples: int
    temperature: float
    top_p: float
    max_tokens: int | None
    metrics: dict[str, Any]
    primary: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
