"""Write the site: one folder of static files that opens from disk (``file://``) with no server.

Layout::

    index.html                       the sweeps
    assets/site.css, assets/site.js
    <sweep>/index.html               leaderboard, notes, curves or figures, runs
    <sweep>/leaderboard.csv          the records the leaderboard shows (harness table's csv)
    <sweep>/runs/<run>.html          one page per run
    <sweep>/samples.html             the sample viewer; its data in <sweep>/samples/<run>__<suite>.js
    <sweep>/figures/*.png            committed figures, downscaled copies
    <sweep>/files/*                  the results folder's other files (.md, .json, .txt), copied

Every link stays inside the site (checked after writing), so the folder can be moved or served alone. The site is
built in a temporary sibling folder and then put in place. ``--out`` must be new, empty or a site this command
wrote: ``.harness-site`` lists the files it wrote, and a rebuild replaces those and nothing else (a file the user
added stays; one in the way of a new site file is refused before anything changes).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from . import pages
from .sources import RunInfo, Sweep, load_sweeps, seed_text
from .svg import json_for_html

MARKER = ".harness-site"  # written into every site: the files it wrote (JSON), the only ones a rebuild replaces
_LINK = re.compile(r'(?:href|src)="([^"]*)"')
_EXTERNAL = ("#", "data:", "http://", "https://", "mailto:", "javascript:")
FIGURE_WIDTH = 900  # committed PNGs wider than this are downscaled


def build_site(
    paths,
    out,
    *,
    command: str = "harness site",
    baseline: str | None = None,
    allow_mixed_protocols: bool = False,
    max_samples: int | None = None,
) -> Path:
    """Build the site for ``paths`` (runs folders or committed results folders) into ``out``; returns ``out``."""
    from harness.io import check_output_dir

    out = Path(out)
    check_output_dir(out, "--out")
    own = own_files(out)
    kw = {} if max_samples is None else {"max_samples": max_samples}
    sweeps = load_sweeps(paths, baseline=baseline, allow_mixed_protocols=allow_mixed_protocols, **kw)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_site(tmp, sweeps, command)
        check_links(tmp)
        files = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file())
        (tmp / MARKER).write_text(json.dumps({"written_by": "harness site", "files": files}, indent=0) + "\n")
        os.chmod(tmp, 0o777 & ~_umask())
        if out.exists():
            _replace_own(tmp, out, own, files)
        else:
            os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def own_files(out: Path) -> set[str]:
    """The files an earlier build wrote into ``out`` (its MARKER's list); empty for a new or empty folder. Any
    other folder is refused: the site writes only where it wrote before."""
    if not out.is_dir() or not any(out.iterdir()):
        return set()
    if not (out / MARKER).is_file():
        raise ValueError(
            f"--out {out}: not empty and not a site written by harness site (no {MARKER}); give a new "
            "or empty folder (nothing is overwritten)"
        )
    try:
        files = json.loads((out / MARKER).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, TypeError, KeyError):
        files = None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError(
            f"--out {out}: its {MARKER} lists no files (a site of an older harness site), so its own files cannot "
            "be told from yours; remove that folder or give a new one (nothing is overwritten)"
        )
    return set(files)


def _replace_own(tmp: Path, out: Path, own: set[str], files: list[str]) -> None:
    """Move the new site's ``files`` from ``tmp`` into ``out`` and remove the earlier build's files it no longer
    has; every other entry of ``out`` stays. A user's file where a site file goes is refused before any change."""
    for f in files:
        rel = Path(f)
        in_way = [a for a in [*reversed(rel.parents[:-1]), rel] if (out / a).exists() or (out / a).is_symlink()]
        for a in in_way:
            if (a == rel and (str(a) not in own or not (out / a).is_file())) or (a != rel and not (out / a).is_dir()):
                raise ValueError(
                    f"--out {out}: {out / a} was not written by harness site and the new site writes {f}; move it "
                    "away and rebuild (nothing was changed)"
                )
    for f in files:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / f, out / f)
    for f in sorted(own - set(files)):
        (out / f).unlink(missing_ok=True)
        for parent in Path(f).parents[:-1]:  # folders the old site made, once empty
            try:
                (out / parent).rmdir()
            except OSError:
                break
    os.replace(tmp / MARKER, out / MARKER)


def check_links(root: Path) -> None:
    """Every relative ``href``/``src`` of every page names a file inside ``root`` (a site that opens alone)."""
    top = root.resolve()
    for page in sorted(root.rglob("*.html")):
        for link in _LINK.findall(page.read_text(encoding="utf-8")):
            link = html.unescape(link)
            if not link or link.startswith(_EXTERNAL):
                continue
            target = (page.parent / link.split("#", 1)[0].split("?", 1)[0]).resolve()
            if not target.is_relative_to(top) or not target.exists():
                raise RuntimeError(f"site build: {page.relative_to(root)} links to {link}, not a file of the site")


def _umask() -> int:
    from harness.io import current_umask

    return current_umask()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_site(root: Path, sweeps: list[Sweep], command: str) -> None:
    assets = resources.files("harness.site").joinpath("assets")
    for name in ("site.css", "site.js"):
        _write(root / "assets" / name, assets.joinpath(name).read_text(encoding="utf-8"))
    _write(
        root / "index.html",
        pages.page("Results", pages.index_body(sweeps, command), ".", [("harness results", None)], "index"),
    )
    for s in sweeps:
        _write_sweep(root, s)


def _write_sweep(root: Path, s: Sweep) -> None:
    d = root / s.slug
    d.mkdir(parents=True)
    if s.csv_text:
        _write(d / "leaderboard.csv", s.csv_text)
    figures = []  # (name, copy, link): the downscaled copy is the figure the page links to
    for f in s.figures:
        _copy_figure(f, d / "figures" / f.name)
        figures.append((f.stem, f"figures/{f.name}", f"figures/{f.name}"))
    other = []
    for f in s.other_files:  # small text files of a results folder: copied in, so no link leaves the site
        (d / "files").mkdir(exist_ok=True)
        shutil.copyfile(f, d / "files" / f.name)
        other.append((f.name, f"files/{f.name}"))

    def run_href(run: RunInfo) -> str:
        return f"runs/{run.slug}.html"

    def samples_href(run: RunInfo, suite: str) -> str:
        return f"samples.html#suite={suite}&a={run.slug}"

    index = _write_samples(d, s)
    crumbs = [("harness results", "../index.html"), (s.title, None)]
    body = pages.sweep_body(s, figures, other, run_href, samples_href, "leaderboard.csv", bool(index))
    _write(d / "index.html", pages.page(s.title, body, "..", crumbs, "sweep"))
    for run in s.runs:
        crumbs = [("harness results", "../../index.html"), (s.title, "../index.html"), (run.slug, None)]
        body = pages.run_body(s, run, "../index.html", lambda r, suite: "../" + samples_href(r, suite))
        _write(d / "runs" / f"{run.slug}.html", pages.page(run.slug, body, "../..", crumbs, "run"))
    if index:
        crumbs = [("harness results", "../index.html"), (s.title, "index.html"), ("samples", None)]
        _write(
            d / "samples.html", pages.page(f"{s.title}: samples", pages.samples_body(s, index), "..", crumbs, "samples")
        )


def _write_samples(d: Path, s: Sweep) -> list[dict]:
    """One data script per (run, suite) and the viewer's index of them."""
    index = []
    for run in s.runs:
        for ss in run.samples:
            key = f"{run.slug}__{ss.suite}"
            data = {"problems": ss.problems, "rows": ss.rows}
            _write(
                d / "samples" / f"{key}.js",
                f"(window.HARNESS_SAMPLES = window.HARNESS_SAMPLES || {{}})[{json.dumps(key)}] = "
                f"{json_for_html(data)};\n",
            )
            metric = None
            if ss.result:
                prim = ss.result.get("primary")
                val = (ss.result.get("metrics") or {}).get(prim)
                if isinstance(val, (int, float)):
                    metric = {"name": prim, "value": val}
            index.append(
                {
                    "key": key,
                    "file": f"samples/{key}.js",
                    "run": run.slug,
                    "suite": ss.suite,
                    "label": _run_label(run),
                    "run_href": f"runs/{run.slug}.html",
                    "rows": len(ss.rows),
                    "total_rows": ss.total_rows,
                    "problems": len(ss.problems),
                    "correct": ss.n_correct,
                    "metric": metric,
                    "path": str(ss.path),
                    "prompt_source": ss.prompt_source,
                }
            )
    return index


def _run_label(run: RunInfo) -> str:
    i, seed = run.ident, seed_text(run.ident.get("seed"))
    return f"{i.get('label')} · {i.get('model')}" + (f" · seed {seed}" if seed else "") + f" ({run.slug})"


def _copy_figure(src: Path, dest: Path) -> None:
    """A committed PNG, downscaled to FIGURE_WIDTH and palette-quantised when Pillow is there (else copied)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        from PIL import Image
    except ImportError:
        shutil.copyfile(src, dest)
        return
    with Image.open(src) as im:
        im = im.convert("RGB")
        if im.width > FIGURE_WIDTH:
            im = im.resize((FIGURE_WIDTH, round(im.height * FIGURE_WIDTH / im.width)), Image.LANCZOS)
        im.quantize(colors=128, method=Image.MEDIANCUT, dither=Image.NONE).save(dest, optimize=True)
