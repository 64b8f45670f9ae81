"""Write the site: one folder of static files that opens from disk (``file://``) with no server.

Layout::

    index.html                       the sweeps
    assets/site.css, assets/site.js
    <sweep>/index.html               leaderboard, notes, curves or figures, runs
    <sweep>/leaderboard.csv          the records the leaderboard shows (harness table's csv)
    <sweep>/runs/<run>.html          one page per run
    <sweep>/samples.html             the sample viewer; its data in <sweep>/samples/<run>__<suite>.js
    <sweep>/figures/*.png            committed figures, downscaled copies

The site is built in a temporary sibling folder and then put in place, so an interrupted build never leaves half a
site; an existing ``--out`` folder is replaced only when it is a site written by this command.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from . import pages
from .sources import RunInfo, Sweep, load_sweeps, seed_text
from .svg import json_for_html

MARKER = ".harness-site"  # written into every site; only folders holding it are ever replaced
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
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(
            f"--out {out}: not empty and not a site written by harness site (no {MARKER}); give a new "
            "or empty folder (nothing is overwritten)"
        )
    kw = {} if max_samples is None else {"max_samples": max_samples}
    sweeps = load_sweeps(paths, baseline=baseline, allow_mixed_protocols=allow_mixed_protocols, **kw)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _write_site(tmp, sweeps, command, out)
        os.chmod(tmp, 0o777 & ~_umask())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / "site")
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def _umask() -> int:
    from harness.io import current_umask

    return current_umask()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_site(root: Path, sweeps: list[Sweep], command: str, final_out: Path) -> None:
    (root / MARKER).write_text("written by harness site; this folder is replaced when the site is rebuilt\n")
    assets = resources.files("harness.site").joinpath("assets")
    for name in ("site.css", "site.js"):
        _write(root / "assets" / name, assets.joinpath(name).read_text(encoding="utf-8"))
    _write(
        root / "index.html",
        pages.page("Results", pages.index_body(sweeps, command), ".", [("harness results", None)], "index"),
    )
    for s in sweeps:
        _write_sweep(root, s, final_out)


def _write_sweep(root: Path, s: Sweep, final_out: Path) -> None:
    d = root / s.slug
    d.mkdir(parents=True)
    if s.csv_text:
        _write(d / "leaderboard.csv", s.csv_text)
    # links to the source folder's files: relative to where the site is written (they work while both stay put)
    here = (final_out / s.slug).resolve()
    figures = []
    for f in s.figures:
        dest = d / "figures" / f.name
        _copy_figure(f, dest)
        figures.append((f.stem, f"figures/{f.name}", os.path.relpath(f.resolve(), here)))
    other = [(f.name, os.path.relpath(f.resolve(), here)) for f in s.other_files]

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
