"""The training-data sources ``harness data prepare`` knows: where they live, their pinned revision, how a row of
their hub schema becomes ``(problem, raw answer)``, and the readers (a local file, or the hub through
``datasets.load_dataset(hub_id, revision=..., split=...)``).

Row schemas (as on the hub, verl's RL format):

- DAPO-Math-17k (``BytedTsinghua-SIA/DAPO-Math-17k``): ``data_source`` (``math_dapo``), ``prompt`` = one user
  message ``[{content, role}]`` wrapping the problem in DAPO's instruction (``DAPO_PREFIX`` + problem +
  ``DAPO_SUFFIX``: answer on a last ``Answer: $Answer`` line), ``ability`` (``MATH``),
  ``reward_model`` = ``{ground_truth, style}`` (an integer string), ``extra_info`` = ``{index}``. The published
  parquet repeats each problem many times (about 1.79M rows for ~17k problems): ``prepare`` deduplicates.
- Eurus-2-RL-Data (``PRIME-RL/Eurus-2-RL-Data``): ``prompt`` = a system message (PRIME's "[ASSESS] [ADVANCE] ..."
  actions prompt) and a user message; math user messages end with ``EURUS_SUFFIX``; ``ability`` ``math`` or
  coding; ``reward_model.ground_truth`` a LaTeX answer (math) or test cases as JSON (coding); ``extra_info``
  ``{index, split}``. ``eurus-2-rl-math`` keeps the math rows only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.io import read_json_rows
from harness.registry import Registry

SAMPLES_DIR = Path(__file__).resolve().parent / "samples"

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
EURUS_SUFFIX = "\n\nPresent the answer in LaTex format: \\boxed{Your answer}"
_EURUS_SUFFIX_RE = re.compile(r"\s*Present the answer in LaTe[Xx] format: \\boxed\{Your answer\}\.?\s*$")


@dataclass
class Extracted:
    """One source row reduced to what a training row needs, or the reason it is dropped."""

    problem: str = ""
    answer: object = None
    drop: str | None = None  # not_math | unrecognised_prompt
    removed: tuple[str, ...] = ()  # the source's own instruction parts taken off the problem
    data_source: str | None = None
    index: object = None


@dataclass(frozen=True)
class Source:
    name: str
    hub_id: str
    split: str
    revision: str | None  # pinned default commit for --source hub
    revision_note: str  # where the pin comes from / how far it was verified
    extract: Callable[[dict], Extracted]
    description: str
    removed_text: dict = field(default_factory=dict)  # part name -> the exact text prepare takes off
    fields: tuple[str, ...] = ("prompt", "reward_model", "ability")  # the hub schema's columns ``extract`` reads

    @property
    def sample(self) -> Path:
        return SAMPLES_DIR / f"{self.name}.parquet"


SOURCES: Registry[Source] = Registry("data source")


def _messages(row: dict) -> list[dict]:
    msgs = row.get("prompt")
    if isinstance(msgs, str):
        return [{"role": "user", "content": msgs}]
    return [dict(m) for m in (msgs or []) if isinstance(m, dict)]


def _user_content(row: dict) -> str | None:
    users = [m.get("content") for m in _messages(row) if m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def _ground_truth(row: dict):
    rm = row.get("reward_model") or {}
    return rm.get("ground_truth") if isinstance(rm, dict) else None


def _index(row: dict):
    info = row.get("extra_info") or {}
    return info.get("index") if isinstance(info, dict) else None


def _is_math(row: dict) -> bool:
    return str(row.get("ability") or "").strip().lower() == "math"


def _math_question(row: dict) -> tuple[Extracted, str | None]:
    """A hub row's answer and provenance, and its user message (None, with the reason in ``drop``, when the row
    is no math question this reads)."""
    out = Extracted(answer=_ground_truth(row), data_source=row.get("data_source"), index=_index(row))
    if not _is_math(row):
        out.drop = "not_math"
        return out, None
    text = _user_content(row)
    if text is None:
        out.drop = "unrecognised_prompt"
    return out, text


def dapo_extract(row: dict) -> Extracted:
    out, text = _math_question(row)
    if text is None:
        return out
    removed = []
    if text.startswith(DAPO_PREFIX):
        text, removed = text[len(DAPO_PREFIX) :], [*removed, "dapo_prefix"]
    if text.endswith(DAPO_SUFFIX):
        text, removed = text[: -len(DAPO_SUFFIX)], [*removed, "dapo_suffix"]
    out.problem, out.removed = text.strip(), tuple(removed)
    return out


def eurus_extract(row: dict) -> Extracted:
    out, text = _math_question(row)
    if text is None:
        return out
    removed = ["system_prompt"] if any(m.get("role") == "system" for m in _messages(row)) else []
    m = _EURUS_SUFFIX_RE.search(text)
    if m:
        text, removed = text[: m.start()], [*removed, "eurus_suffix"]
    out.problem, out.removed = text.strip(), tuple(removed)
    return out


SOURCES.register(
    "dapo-math-17k",
    Source(
        name="dapo-math-17k",
        hub_id="BytedTsinghua-SIA/DAPO-Math-17k",
        split="train",
        revision="65877096c24ffa7abc4e4fa5edb95cf3413a5674",
        revision_note=(
            "commit pinned by a public third-party build script that checks the file data/dapo-math-17k.parquet "
            "at it (299,363,855 bytes, sha256 534375d6bb8630d22ab46a56e11f2ffec1d288d8f7d04099bc82d68948705941); "
            "not downloaded here (no network)"
        ),
        extract=dapo_extract,
        description="DAPO-Math-17k (the paper's Clip-Cov/KL-Cov training set), deduplicated, integer answers",
        removed_text={"dapo_prefix": DAPO_PREFIX, "dapo_suffix": DAPO_SUFFIX},
    ),
)
SOURCES.register(
    "eurus-2-rl-math",
    Source(
        name="eurus-2-rl-math",
        hub_id="PRIME-RL/Eurus-2-RL-Data",
        split="train",
        revision="5cbc5bc54c9c8417afd3539fb267422c33b525e6",
        revision_note=(
            "a commit of the dataset whose stored Hub tree page lists train.parquet (1.72 GB) and "
            "validation.parquet; main later gained a commit 'remove none ground truth' whose full id could not be "
            "looked up offline (prepare drops null ground truths either way); not downloaded here (no network)"
        ),
        extract=eurus_extract,
        description="the math rows of Eurus-2-RL-Data (PRIME's RL set; NuminaMath problems, LaTeX answers)",
        removed_text={"system_prompt": "the system message (PRIME's actions prompt)", "eurus_suffix": EURUS_SUFFIX},
    ),
)


def get_source(name: str) -> Source:
    return SOURCES.get(name)


# --------------------------------------------------------------------------------------------------------------
# readers


def read_file_rows(path: str | Path) -> list[dict]:
    """Rows of a local file in the source's hub schema: ``.parquet`` (pyarrow), ``.jsonl`` or ``.json``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--source {path}: no such file")
    name = path.name.lower()
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(
                f"--source {path}: reading parquet needs pyarrow: pip install 'entropy-harness[eval]'"
            ) from None
        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # noqa: BLE001 - any unreadable file: one line naming it
            raise ValueError(f"--source {path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    if name.endswith((".jsonl", ".json")):
        try:
            return read_json_rows(path)
        except ValueError as e:
            raise ValueError(f"--source {e}") from None
    raise ValueError(f"--source {path}: unknown file type; give a .parquet, .jsonl or .json file")


def hub_rows(hub_id: str, *, revision: str | None, split: str, **load_kwargs) -> list[dict]:
    """``datasets.load_dataset(hub_id, revision=revision, split=split)`` as a list of row dicts.

    ``load_kwargs`` pass through (``data_files=`` points the same call at a local file: the tests' way in)."""
    try:
        import datasets
    except ImportError:
        raise ValueError("--source hub needs the datasets package: pip install 'entropy-harness[eval]'") from None
    try:
        ds = datasets.load_dataset(hub_id, revision=revision, split=split, **load_kwargs)
    except Exception as e:  # noqa: BLE001 - offline, gated, moved: the same advice
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise FileNotFoundError(
            f"could not load {hub_id} at revision {revision or 'main (unpinned)'} split {split!r}: "
            f"{type(e).__name__}: {first}. Offline? Download the parquet and pass --source FILE"
        ) from None
    return ds.to_list()


def sha256_rows(rows: list[dict]) -> str:
    """Content hash of rows read from the hub: sha256 of one JSON line per row (sorted keys, json's default
    separators: not provenance.rows_sha256's compact ones, so the manifests written before keep their hashes)."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
    return digest.hexdigest()
