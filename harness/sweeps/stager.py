"""``harness stage``: put every input a sweep reads on shared storage, with its revision and sha256 hashes.

Differs from filling a Hugging Face cache by hand: hub models go into the stage's own hub cache (what the jobs'
``HF_HUB_CACHE`` names), eval suites are written as ``suites/<suite>.jsonl`` in the hub's fields at a resolved
commit (a suite the code leaves unpinned is staged at the hub's main of that day, and its commit recorded), local
inputs are hashed where they are (not copied), and the files a backend renders for every run (OpenRLHF's in-loop
eval set) are rendered once here. The manifest is rewritten after every input, so a stopped staging keeps what
it finished and a rerun skips it.

``source``: ``hub`` (the network: ``huggingface_hub.snapshot_download``, ``datasets.load_dataset``), or a local
folder standing in for the hub: ``<folder>/<org>/<name>/`` holds the files of that model or dataset repo (and
optionally ``.revision``, the commit they are), read with the same calls.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.run.offline import HUB_DIR, MANIFEST, SUITES_DIR
from harness.sweeps.staging import MANIFEST_SCHEMA, Need, apply_stage, entries, entry_problem, needs, read_manifest

MIRROR_REVISION = ".revision"  # in a local copy of a repo: the hub commit it is a copy of


def stage_sweep(spec, cells, stage_dir: Path, source: str = "hub", log: Callable[[str], None] = print) -> dict:
    """Stage every input of ``cells`` into ``stage_dir``; returns the manifest. Refuses (ValueError, nothing
    written) an input no offline job can read or a local input that does not exist."""
    from harness.io import check_output_dir

    stage_dir = Path(stage_dir).absolute()
    wanted = needs(cells)
    _refuse_unstageable(wanted)
    staged_cells = apply_stage(cells, stage_dir)  # refuses what cannot be pointed at a stage
    if source != "hub" and not Path(source).is_dir():
        raise ValueError(f"--source {source}: not a folder (give hub, or a folder of local copies of hub repos)")
    check_output_dir(stage_dir, "--to")
    manifest = read_manifest(stage_dir)
    have = entries(manifest)
    if source != "hub":
        source = str(Path(source).absolute())
    sweeps = {**(manifest.get("sweeps") or {}), spec.name: str(spec.source) if spec.source else None}
    manifest.update(schema_version=MANIFEST_SCHEMA, sweeps=sweeps)
    order = {"model": 0, "local": 1, "suite": 2}
    todo = sorted((n for n in wanted if n.kind != "file"), key=lambda n: order[n.kind])
    for i, need in enumerate(todo, 1):
        old = have.get(need.key)
        if old is not None and entry_problem(old, stage_dir) is None:
            log(f"[{i}/{len(todo)}] {need.describe()}: staged already ({_short(old)})")
            continue
        doing = "hashing it where it is" if need.kind == "local" else f"staging from {source}"
        log(f"[{i}/{len(todo)}] {need.describe()}: {doing} ...")
        have[need.key] = STAGERS[need.kind](need, stage_dir, source, log)
        log(f"[{i}/{len(todo)}] {need.describe()}: {_short(have[need.key])}")
        _write(stage_dir, manifest, have, wanted)
    for rel, render in _backend_files(staged_cells).items():
        have[("file", rel)] = _file_entry(stage_dir, rel, render())
        log(f"file {rel}: {_short(have[('file', rel)])}")
    return _write(stage_dir, manifest, have, wanted)


def _refuse_unstageable(wanted: list[Need]) -> None:
    for need in wanted:
        if need.kind == "hub_dataset":
            raise ValueError(
                f"{need.role} {need.name} (cells {', '.join(need.cells[:3])}): a training set named by its hub id, "
                f"which an offline job cannot load (datasets reads no hub-cached dataset without the network); "
                f"download it into a JSONL (`harness data prepare` for the sources it knows) and name that file"
            )
        if need.kind == "local" and not Path(need.name).expanduser().exists():
            raise ValueError(
                f"{need.role} {need.name} (cells {', '.join(need.cells[:3])}): not found; a local input is hashed "
                f"where it is (on storage the compute nodes share), so it must exist before staging"
            )


def _write(stage_dir: Path, manifest: dict, have: dict, wanted: list[Need]) -> dict:
    """The manifest with the sweep's inputs first (in need order), then anything staged before for other sweeps."""
    from harness.io import atomic_write_json

    keys = [n.key for n in wanted if n.key in have]
    rest = [k for k in have if k not in keys]
    manifest["inputs"] = [have[k] for k in keys + rest]
    manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_json(stage_dir / MANIFEST, manifest)
    return manifest


def _short(entry: dict) -> str:
    size = entry.get("bytes") or 0
    rev = entry.get("revision")
    return f"{size / 2**20:.1f} MiB" + (f", revision {rev}" if rev else "") + f", sha256 {entry['sha256'][:12]}"


# ---------------------------------------------------------------------------------------------- hashing
def hash_files(root: Path, names: list[str]) -> list[dict]:
    """``[{path, bytes, sha256}]`` of ``root/<name>``, reading every byte (a progress bar on stderr)."""
    from tqdm import tqdm

    from harness.provenance import file_sha256

    total = sum((root / n).stat().st_size for n in names)
    out = []
    with tqdm(total=total, unit="B", unit_scale=True, desc="sha256", file=sys.stderr, disable=total < 2**26) as bar:
        for n in names:
            size = (root / n).stat().st_size
            out.append({"path": n, "bytes": size, "sha256": file_sha256(root / n)})
            bar.update(size)
    return out


def tree_entry(root: Path) -> dict:
    """``files``, ``bytes`` and one ``sha256`` over the sorted ``(path, sha256)`` list of a directory's files."""
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    files = hash_files(root, [n for n in names if n != MIRROR_REVISION])
    digest = hashlib.sha256("".join(f"{f['path']}\t{f['sha256']}\n" for f in files).encode()).hexdigest()
    return {"files": files, "bytes": sum(f["bytes"] for f in files), "sha256": digest}


# ---------------------------------------------------------------------------------------------- one kind each
def stage_model(need: Need, stage_dir: Path, source: str, log) -> dict:
    """A hub model into the stage's hub cache (``models--<org>--<name>/snapshots/<commit>``, ``refs/main``)."""
    cache = stage_dir / HUB_DIR
    if source == "hub":
        from huggingface_hub import snapshot_download

        try:
            snap = Path(snapshot_download(need.name, cache_dir=str(cache)))
        except Exception as e:  # noqa: BLE001 - offline, gated, misspelt: one line naming the model
            raise FileNotFoundError(f"model {need.name}: could not download it ({type(e).__name__}: {e})") from None
        kind_of_revision = "hub commit"
    else:
        snap, kind_of_revision = _copy_into_cache(need.name, Path(source), cache)
    entry = tree_entry(snap)
    return {
        "kind": "model",
        "name": need.name,
        "source": source,
        "revision": snap.name,
        "revision_is": kind_of_revision,
        "path": str(snap.relative_to(stage_dir)),
        **entry,
    }


def _copy_into_cache(repo_id: str, mirror: Path, cache: Path) -> tuple[Path, str]:
    """A local copy of a repo into the hub cache's layout; its revision is ``.revision`` when the copy has one,
    else a 40-hex hash of its files (what ``refs/main`` points to)."""
    src = mirror / repo_id
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"--source {mirror}: no model {repo_id} there (expected {src}/config.json)")
    marker = src / MIRROR_REVISION
    if marker.is_file():
        revision, kind = marker.read_text().strip(), "hub commit (as the local copy states)"
    else:
        revision, kind = tree_entry(src)["sha256"][:40], "hash of the local copy's files (no hub commit)"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / revision
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(src, snap, ignore=shutil.ignore_patterns(MIRROR_REVISION, ".git"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap, kind


def stage_suite(need: Need, stage_dir: Path, source: str, log) -> dict:
    """An eval suite's rows at a resolved commit into ``suites/<suite>.jsonl`` (checked: the suite loads them)."""
    from harness.evals.suites import get_suite
    from harness.io import atomic_write_text

    suite = get_suite(need.name)
    if source == "hub":
        revision = _hub_commit(suite) or suite.revision
        rows = suite.hub_rows(revision=revision)
        where = "hub commit" if revision else "the hub's main on the day of staging (commit not found)"
    else:
        copy = Path(source) / suite.hf_id
        if not copy.is_dir():
            raise FileNotFoundError(f"--source {source}: no dataset {suite.hf_id} there (expected a folder {copy})")
        marker = copy / MIRROR_REVISION
        revision = marker.read_text().strip() if marker.is_file() else None
        rows = suite.hub_rows(copy=copy)
        where = "hub commit (as the local copy states)" if revision else "a local copy (no hub commit)"
    text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    path = stage_dir / SUITES_DIR / f"{suite.name}.jsonl"
    atomic_write_text(path, text)
    problems = suite.load(data_dir=path.parent)  # the rows convert as every job will convert them
    return {
        "kind": "suite",
        "name": suite.name,
        "hf_id": suite.hf_id,
        "hf_config": suite.hf_config,
        "split": suite.split,
        "source": source,
        "revision": revision,
        "revision_is": where,
        "pinned_in_code": suite.revision,
        "path": str(path.relative_to(stage_dir)),
        "rows": len(problems),
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def _hub_commit(suite) -> str | None:
    """The commit the hub serves for the suite's pinned revision (or main): staged at a known commit."""
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(suite.hf_id, revision=suite.revision).sha
    except Exception:  # noqa: BLE001 - no network, no such repo: the load that follows names the problem
        return None


def stage_local(need: Need, stage_dir: Path, source: str, log) -> dict:
    """A local file or directory, hashed where it is (``harness data prepare``'s manifest adds its source)."""
    from harness.data import manifest_of

    path = Path(need.name).expanduser().absolute()
    if path.is_dir():
        entry = tree_entry(path)
    else:
        (rec,) = hash_files(path.parent, [path.name])
        entry = {"bytes": rec["bytes"], "sha256": rec["sha256"]}
    out = {"kind": "local", "name": need.name, "role": need.role, "path": str(path), **entry}
    prepared = manifest_of(path) if path.suffix == ".jsonl" else None
    if prepared:
        src = prepared.get("source") or {}
        out["prepared_from"] = {k: src.get(k) for k in ("kind", "hub_id", "revision", "path") if src.get(k)}
        out["revision"] = src.get("revision")
    return out


def _file_entry(stage_dir: Path, rel: str, text: str) -> dict:
    from harness.io import atomic_write_text

    path = stage_dir / rel
    data = text.encode("utf-8")
    if not path.is_file() or path.read_bytes() != data:
        atomic_write_text(path, text)
    return {
        "kind": "file",
        "name": rel,
        "path": rel,
        "rows": text.count("\n"),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _backend_files(staged_cells) -> dict[str, Callable[[], str]]:
    """Every file the cells' backends render once (``Backend.stage_files``), from the staged configs."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    out: dict[str, Callable[[], str]] = {}
    for c in staged_cells:
        for rel, render in get_backend(c.config["backend"]).stage_files(load_config(c.config)).items():
            out.setdefault(rel, render)
    return out


STAGERS = {"model": stage_model, "suite": stage_suite, "local": stage_local}


def verify(stage_dir: Path, wanted: list[Need]) -> list[str]:
    """Every staged file of the sweep's inputs re-hashed: one line per input that differs from the manifest."""
    from harness.sweeps.staging import missing

    return missing(wanted, stage_dir, hashes=True)
