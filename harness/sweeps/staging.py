"""What a sweep reads from outside its run directories, and whether a stage directory holds it.

``harness stage SPEC`` (harness/sweeps/stager.py) puts these inputs on shared storage and writes the stage's
``manifest.json``; a spec's ``stage_dir`` makes its jobs read only that (``harness.run.offline``). This module
lists a sweep's inputs (:func:`needs`), checks a stage against them before anything is queued
(:func:`submission_problem`, also ``harness doctor``) and points cells at a stage (:func:`apply_stage`) without
changing a run id: ``eval.data_dir`` measures nothing, and a hub id stays a hub id (the job's ``HF_HUB_CACHE``
is the stage's hub cache).

Inputs (``Need.kind``): ``model`` a hub model id (``model.name``); ``local`` a file or directory the config names
(a model directory, a training JSONL, ``eval.data_dir`` files: recorded with their hashes, not copied);
``suite`` an eval suite read from the hub (``eval.suites``); ``file`` a file a backend renders once for every run
(``Backend.stage_files``: OpenRLHF's in-loop eval set); ``hub_dataset`` a training set named by hub id, which no
offline job can read (``datasets`` finds no hub-cached dataset offline): refused, with what to do instead.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.run.offline import MANIFEST, SUITES_DIR, setup_line

MANIFEST_SCHEMA = 1
FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".gz", ".gguf", ".csv", ".txt")
HUB_KINDS = ("model", "suite", "hub_dataset")


@dataclass
class Need:
    kind: str  # model | local | suite | file | hub_dataset
    name: str  # hub id, path as the config names it, suite name, or a path relative to the stage
    role: str  # the config key that names it (model.name, task.name, eval.suites, eval.data_dir, a backend's file)
    cells: list[str] = field(default_factory=list)  # aliases of the cells that read it

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.name

    def describe(self) -> str:
        return f"{self.kind} {self.name}"


def where_from(name: str) -> str:
    """``hub`` (an ``org/name`` id), ``local`` (a path: existing, or shaped like one) or ``builtin`` (a name the
    backend resolves itself: pocket sizes and tasks, ``pkg://`` files)."""
    if "://" in name:
        return "builtin"
    if Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.count("/") > 1:
        return "local"
    if name.lower().endswith(FILE_SUFFIXES):
        return "local"
    return "hub" if name.count("/") == 1 else "builtin"


def needs(cells) -> list[Need]:
    """Every input the cells read from outside their run directories, each once, in the order first needed."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    found: dict[tuple[str, str], Need] = {}

    def add(kind: str, name: str, role: str, alias: str) -> None:
        need = found.setdefault((kind, name), Need(kind, name, role))
        if alias not in need.cells:
            need.cells.append(alias)

    for c in cells:
        cfg = c.config
        model, task = str(cfg["model"]["name"]), str(cfg["task"]["name"])
        if where_from(model) != "builtin":
            add("model" if where_from(model) == "hub" else "local", model, "model.name", c.alias)
        if where_from(task) != "builtin":
            add("hub_dataset" if where_from(task) == "hub" else "local", task, "task.name", c.alias)
        for kind, name in suite_needs(cfg.get("eval") or {}):
            add(kind, name, "eval.data_dir" if kind == "local" else "eval.suites", c.alias)
        for rel in get_backend(cfg["backend"]).stage_files(load_config(cfg)):
            add("file", rel, f"the {cfg['backend']} backend", c.alias)
    return list(found.values())


def suite_needs(ev: dict) -> list[tuple[str, str]]:
    """``(kind, name)`` of the suite data an ``eval:`` section reads: its hub suites (``suite``), or the files of
    ``eval.data_dir`` when it names one (``local``); nothing for fixtures and for suites a backend generates."""
    from harness.evals.suites import find_local, resolve_suites

    if not ev.get("suites") or ev.get("fixtures"):
        return []
    hub = [s for s in resolve_suites(list(ev["suites"])) if s.loader is None]
    if ev.get("data_dir"):
        out = []
        for s in hub:
            try:
                out.append(("local", str(find_local(Path(ev["data_dir"]), s.name))))
            except FileNotFoundError:
                out.append(("local", str(Path(ev["data_dir"]) / f"{s.name}.jsonl")))
        return out
    return [("suite", s.name) for s in hub]


# ---------------------------------------------------------------------------------------------- the manifest
def read_manifest(stage_dir: str | Path) -> dict:
    """The stage's manifest (an empty one when there is none); ValueError naming the file when it is unreadable."""
    path = Path(stage_dir) / MANIFEST
    if not path.is_file():
        return {"schema_version": MANIFEST_SCHEMA, "inputs": []}
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        raise ValueError(f"{path}: not a readable staging manifest ({e}); stage again with harness stage") from None
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list):
        raise ValueError(f"{path}: not a staging manifest (no 'inputs' list); stage again with harness stage")
    return data


def entries(manifest: dict) -> dict[tuple[str, str], dict]:
    return {(e.get("kind"), e.get("name")): e for e in manifest.get("inputs", []) if isinstance(e, dict)}


def entry_files(entry: dict, stage_dir: str | Path) -> list[tuple[Path, dict]]:
    """``(absolute path, {bytes, sha256})`` of every file an entry holds."""
    base = Path(entry["path"]) if Path(entry["path"]).is_absolute() else Path(stage_dir) / entry["path"]
    if "files" in entry:
        return [(base / f["path"], f) for f in entry["files"]]
    return [(base, entry)]


def entry_problem(entry: dict, stage_dir: str | Path, hashes: bool = False) -> str | None:
    """Why a staged entry cannot be read as recorded (a file missing, another size; with ``hashes`` another
    sha256), else None."""
    from harness.provenance import file_sha256

    for path, rec in entry_files(entry, stage_dir):
        if not path.is_file():
            return f"{path} is missing"
        size = path.stat().st_size
        if size != rec.get("bytes"):
            return f"{path} changed since it was staged ({size} bytes, staged {rec.get('bytes')})"
        if hashes and file_sha256(path) != rec.get("sha256"):
            return f"{path} changed since it was staged (sha256 differs)"
    return None


def missing(wanted: list[Need], stage_dir: str | Path, hashes: bool = False) -> list[str]:
    """One line per input the stage does not hold as its manifest records it (empty: everything is staged)."""
    have = entries(read_manifest(stage_dir))
    out = []
    for need in wanted:
        entry = have.get(need.key)
        if entry is None:
            out.append(f"{need.describe()}: not staged")
            continue
        problem = entry_problem(entry, stage_dir, hashes)
        if problem:
            out.append(f"{need.describe()}: {problem}")
    return out


# ---------------------------------------------------------------------------------------------- the sweep
def stage_dir_of(spec) -> Path | None:
    """The spec's ``stage_dir`` as an absolute path (relative to the working directory, like ``--runs-dir``)."""
    return Path(spec.stage_dir).expanduser().absolute() if spec.stage_dir else None


def stage_command(spec, to: Path | None = None) -> str:
    source = str(spec.source) if spec.source else "SPEC"
    return f"harness stage {source}" + (f" --to {to}" if to else "")


def submission_problem(spec, cells, executor: str, online: bool = False) -> str | None:
    """Why the sweep must not be queued yet (None: it may): a staged sweep whose stage lacks an input, or (SLURM
    without ``--online``) a sweep that reads the hub from compute nodes, which are usually offline."""
    stage = stage_dir_of(spec)
    if stage is None and (executor != "slurm" or online):
        return None
    wanted = needs(cells)
    if stage is not None:
        lines = missing(wanted, stage)
        if not lines:
            return None
        shown = "; ".join(lines[:6]) + (f"; ... ({len(lines) - 6} more)" if len(lines) > 6 else "")
        return (
            f"sweep {spec.name}: {len(lines)} of its {len(wanted)} inputs are not staged in {stage} ({shown}); its "
            f"jobs run offline and read only the stage: run `{stage_command(spec)}` first"
        )
    hub = [n for n in wanted if n.kind in HUB_KINDS]
    if not hub:
        return None
    shown = ", ".join(n.describe() for n in hub[:6]) + (" ..." if len(hub) > 6 else "")
    return (
        f"sweep {spec.name} reads from the Hugging Face hub ({shown}), and compute nodes are usually offline: put "
        f"them on shared storage with `{stage_command(spec, Path('DIR'))}` and set `stage_dir: DIR` in the spec "
        f"(docs/gpu.md), or pass --online if the compute nodes reach the hub"
    )


def apply_stage(cells, stage_dir: str | Path) -> list:
    """The cells pointed at the stage: ``eval.data_dir`` = its suites (where the config reads hub suites) and a
    job setup line exporting the offline environment. Run ids do not change (checked)."""
    from harness.evals.suites import resolve_suites
    from harness.sweeps.expand import config_id

    stage = Path(stage_dir).absolute()
    out = []
    for c in cells:
        cfg = copy.deepcopy(c.config)
        ev = cfg.get("eval") or {}
        if any(kind == "suite" for kind, _ in suite_needs(ev)):
            generated = [s.name for s in resolve_suites(list(ev["suites"])) if s.loader is not None]
            if generated:
                raise ValueError(
                    f"cell {c.alias}: eval.suites mixes suites its backend generates ({', '.join(generated)}) with "
                    f"hub suites; a staged sweep points eval.data_dir at the staged hub suites, where the generated "
                    f"ones are not: score them in separate cells"
                )
            ev["data_dir"] = str(stage / SUITES_DIR)
        if config_id(cfg) != c.id:  # eval.data_dir is not a measuring setting: this never happens
            raise AssertionError(f"cell {c.alias}: pointing it at the stage changed its run id")
        setup = [*(c.resources.get("setup") or []), setup_line(stage)]
        out.append(dataclasses.replace(c, config=cfg, resources={**c.resources, "setup": setup}))
    return out
