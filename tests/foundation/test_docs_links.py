"""Every link in the README and the docs resolves: markdown links (and their #anchors, to a heading of the target),
and repository paths written in backticks or bare in the text (docs/x.md, harness/x.py) name a file or folder of
the repository. The README stays a five-minute read (at most 15,000 bytes); the details live in docs/."""

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 15_000
# top-level folders a backticked path may start with (a path under another folder is not checked)
TOP = ("docs", "harness", "tests", "sweeps", "scripts", "results", "benchmarks", "methods", "baselines", "evals")
# paths a command writes (git ignores them), so a doc may name them although no checkout has them
GENERATED = ("results/quickstart-local", "results/qs", "results/paper_qwen25", "results/gpu")
# named on purpose although not ours: the file the README's example has the reader create, another project's doc
NOT_OURS = {"methods/capped_pg.py", "docs/algo/entropy.md"}
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"(`+)(.+?)\1")
BARE_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:" + "|".join(TOP) + r")/[\w./-]+?\.[a-z]+)(?![\w/-])")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "results").rglob("README.md"))
    return [f for f in files if f.is_file() and not str(f.relative_to(ROOT)).startswith(GENERATED)]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces -> hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            seen[base] = k + 1
            out.add(base if k == 0 else f"{base}-{k}")
    return out


def _exists(path: Path) -> bool:
    if path.exists() or not path.is_relative_to(ROOT):
        return path.exists()
    rel = str(path.relative_to(ROOT))
    return rel in NOT_OURS or rel.startswith(GENERATED)


def problems(md: Path) -> list[str]:
    """One line per link or path in ``md`` that names nothing in the repository."""
    out = []
    where = md.relative_to(ROOT) if md.is_relative_to(ROOT) else md
    for n, line in prose_lines(md.read_text(encoding="utf-8")):
        spans = [m.group(2).strip() for m in CODE.finditer(line)]
        outside = CODE.sub(" ", line)
        for m in LINK.finditer(outside):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file: ...
                continue
            file, _, anchor = target.partition("#")
            dest = (md.parent / file).resolve() if file else md
            if not _exists(dest):
                out.append(f"{where}:{n}: link to a missing file: {target}")
            elif anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
                out.append(f"{where}:{n}: link to a missing heading: {target}")
        for span in spans:  # a file (has a suffix) or a folder (ends in /); `harness/entropy` is a metric key
            path = re.split(r"::|:\d", span)[0].rstrip(".,")
            looks = re.fullmatch(r"[\w./-]+", path) and (path.endswith("/") or "." in path.rpartition("/")[2])
            if path.split("/")[0] in TOP and "/" in path and looks and not _exists(ROOT / path):
                out.append(f"{where}:{n}: path in backticks names nothing: {span}")
        for m in BARE_PATH.finditer(LINK.sub(" ", outside)):
            mention = m.group(1)
            base = md.parent if mention.startswith("..") else ROOT
            if not _exists((base / mention).resolve()):
                out.append(f"{where}:{n}: mention of a missing file: {mention}")
    return out


def test_every_link_and_path_in_the_docs_resolves():
    files = markdown_files()
    assert len(files) > 20  # README, benchmarks/README.md, docs/**, results/**/README.md were found
    found = [p for f in files for p in problems(f)]
    assert found == [], "\n".join(found)


def test_the_checker_finds_a_broken_link_anchor_and_path(tmp_path):
    md = tmp_path / "page.md"
    md.write_text(
        "# A page\n"
        "[ok](#a-page) [ok too](" + str(ROOT / "docs" / "contracts.md") + "#1-method-contract-harness)\n"
        "[gone](nowhere.md) and [bad anchor](#no-such-heading)\n"
        "`docs/contracts.md` is here, `harness/no_such_module.py` is not; see docs/missing.md.\n"
        "```\n[in a code block](ignored.md) docs/also_ignored.md\n```\n"
    )
    assert problems(md) == [
        f"{md}:3: link to a missing file: nowhere.md",
        f"{md}:3: link to a missing heading: #no-such-heading",
        f"{md}:4: path in backticks names nothing: harness/no_such_module.py",
        f"{md}:4: mention of a missing file: docs/missing.md",
    ]


def test_github_heading_anchors():
    assert slug("Run config (`harness/run/config.py`)") == "run-config-harnessrunconfigpy"
    assert slug("Pocket vs TRL vs the FLOP bound") == "pocket-vs-trl-vs-the-flop-bound"
    assert slug("1. Method contract (`harness`)") == "1-method-contract-harness"


def cli_options(parser) -> dict:
    """command (``data prepare`` for a nested one) -> {option string: its choices or None}."""
    import argparse

    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = cli_options(sub)
                out.update({f"{name} {k}": v for k, v in nested.items() if k})
                out[name] = {s: a.choices for a in sub._actions for s in a.option_strings}
    return out


def readme_command_spans() -> list[str]:
    """The `harness ...` spans of the first column of the README's command table."""
    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `harness ")]
    first = [row.replace("\\|", "\x00").split("|")[1].replace("\x00", "|") for row in rows]
    return [m.group(2) for cell in first for m in CODE.finditer(cell)]


def test_the_readme_command_table_matches_the_cli():
    """One row per subcommand, and every flag (and every listed choice) it shows exists in that command's parser."""
    from harness.cli import build_parser

    options = cli_options(build_parser())
    spans = readme_command_spans()
    commands = {span.split()[1] for span in spans}
    assert commands == {c for c in options if " " not in c}, "the table needs one row per subcommand"
    bad = []
    for span in spans:
        words = span.split()
        cmd = " ".join(words[1:3]) if " ".join(words[1:3]) in options else words[1]
        for i, word in enumerate(words):
            flag = word.strip("[]()")
            if not flag.startswith("--"):
                continue
            if flag not in options[cmd]:
                bad.append(f"{cmd}: no option {flag}")
                continue
            nxt = words[i + 1].strip("[]()") if i + 1 < len(words) else ""
            offered = [c for c in nxt.split("|") if c.islower()] if "|" in nxt else []
            allowed = options[cmd][flag]
            if allowed is not None and not set(offered) <= set(allowed):
                bad.append(f"{cmd} {flag}: {offered} not within {sorted(allowed)}")
    assert bad == []


def test_the_readme_is_a_five_minute_read():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes (limit {README_LIMIT}): move details to docs/"
