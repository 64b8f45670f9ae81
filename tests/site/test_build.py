"""harness site without a browser: the pages hold the leaderboard records' numbers, the links and the samples.

Expected values are worked out by hand in conftest.py's docstring."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
import urllib.request
import warnings
from pathlib import Path

import pandas as pd
import pytest

from harness.results.collect import collect
from harness.results.table import build_leaderboard, to_csv
from harness.site import build_site
from harness.site.serve import make_server
from harness.site.svg import nice_ticks

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(runs_folder, tmp_path):
    return build_site([runs_folder], tmp_path / "site")


def _rows(page, table="leaderboard"):
    rows = page.find("table", id=table).find_all("tr", cls="lb-row")
    return {(r.attrs["data-model"], r.attrs["data-method"]): r for r in rows}


def _flat(points):
    return [v for p in points for v in p]


def _cell(row, col):
    return row.find("td", data_col=col)


def test_leaderboard_cells_show_the_hand_computed_means_intervals_n_and_paired_delta(site, read_page):
    page = read_page(site / "sweep_runs" / "index.html")
    rows = _rows(page)
    assert set(rows) == {
        ("pocket-0.3m", "grpo"),
        ("pocket-0.3m", "kl_cov"),
        ("pocket-1m", "grpo"),
        ("pocket-1m", "kl_cov"),
    }  # the unfinished clip_cov run is no row
    grpo = _cell(rows["pocket-0.3m", "grpo"], "countdown")
    assert grpo.text == "55.0 ± 63.5 (n=2)"  # (50 + 60)/2; 12.706 * 7.071 / sqrt 2
    assert _cell(rows["pocket-0.3m", "kl_cov"], "countdown").text == "65.0 ± 63.5 (n=2)"
    delta = _cell(rows["pocket-0.3m", "kl_cov"], "delta_avg_suites")
    assert delta.text == "+10.0 ± 127.1"  # paired differences +20, 0: mean 10, sd 14.14, 12.706 * 10
    assert not delta.find_all("strong")  # the interval holds 0: not bold
    assert _cell(rows["pocket-1m", "grpo"], "countdown").text == "40.0 (n=1)"
    assert _cell(rows["pocket-1m", "kl_cov"], "delta_avg_suites").text == "+5.0"
    assert "MISSING" in page.find("ul", cls="notes").text and "pocket-1m__clip_cov__s0" in page.text


def test_every_number_on_the_page_equals_the_csv_records_which_are_harness_tables_csv(site, runs_folder, read_page):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected_csv = to_csv(build_leaderboard(collect([runs_folder])))
    assert (site / "sweep_runs" / "leaderboard.csv").read_text() == expected_csv
    csv = pd.read_csv(io.StringIO(expected_csv))
    rows = _rows(read_page(site / "sweep_runs" / "index.html"))
    checked = 0
    for r in csv.itertuples():
        row = rows[r.model, r.method]
        for col in ("countdown", "avg_suites", "avg_samples"):
            td = _cell(row, col)
            assert float(td.attrs["data-value"]) == getattr(r, f"{col}_mean")
            assert td.find("span", cls="mean").text == f"{getattr(r, f'{col}_mean'):.1f}"
            assert int(td.attrs["data-n"]) == getattr(r, f"{col}_n")
            ci = getattr(r, f"{col}_ci")
            assert (float(td.attrs["data-ci"]) == ci) if pd.notna(ci) else "data-ci" not in td.attrs
            checked += 1
        d = _cell(row, "delta_avg_samples")
        assert float(d.attrs["data-value"]) == r.delta_avg_samples
    assert checked == 12


def test_the_metric_switch_offers_what_every_suite_holds_each_table_is_harness_tables_csv(site, runs_folder, read_page):
    """avg@2 (default) and pass@2 (every run holds it; no maj@2: not offered); the pass table's cells are `harness
    table --metric pass`'s csv (0.3m grpo: 60, 70 -> 65.0 ± 63.5), each with its own notes; the hover holds the
    runs' standard error over problems and a run's line under its row shows it (± 5.0 SE for avg, 4.0 for pass)."""
    page = read_page(site / "sweep_runs" / "index.html")
    switch = page.find("form", id="lb-filters").find("select", name="metric")
    assert [o.attrs["value"] for o in switch.find_all("option")] == ["avg", "pass"]
    views = {v.attrs["data-metric"]: v for v in page.find_all("div", cls="lb-view")}
    assert sorted(views) == ["avg", "pass"] and len(page.find_all("div", cls="lb-view")) == 4  # 2 tables, 2 notes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pd.read_csv(io.StringIO(to_csv(build_leaderboard(collect([runs_folder]), metric="pass"))))
    rows = _rows(page, "leaderboard-pass")
    for r in expected.itertuples():
        td = _cell(rows[r.model, r.method], "countdown")
        assert float(td.attrs["data-value"]) == r.countdown_mean and float(td.attrs["data-se"]) == r.countdown_se
    assert _cell(rows["pocket-0.3m", "grpo"], "countdown").text == "65.0 ± 63.5 (n=2)"
    assert float(_cell(_rows(page)["pocket-0.3m", "grpo"], "countdown").attrs["data-se"]) == pytest.approx(5.0)
    pass_seeds = page.find("tr", id=f"seeds-{rows['pocket-0.3m', 'grpo'].attrs['data-row']}")
    assert "countdown 60.0 ± 4.0 SE" in pass_seeds.text and "countdown 70.0 ± 4.0 SE" in pass_seeds.text
    avg_seeds = page.find("tr", id=f"seeds-{_rows(page)['pocket-0.3m', 'grpo'].attrs['data-row']}")
    assert "countdown 50.0 ± 5.0 SE" in avg_seeds.text
    notes = {m: [li.text for li in v.find_all("li")] for m, v in views.items() if v.find_all("ul", cls="notes")}
    assert notes["pass"][0].startswith("Metric: pass@k: unbiased") and notes["avg"][0].startswith("Metric: avg@k")
    assert any(n.startswith("protocol countdown: pass@2 | ") for n in notes["pass"])
    assert any("at most 2 seed(s) per arm: no test is run and nothing is marked" in n for n in notes["pass"])
    assert not page.find_all("strong")  # 2 seeds: nothing marked in either metric


def test_a_cell_links_to_its_run_or_to_the_list_of_its_seeds_and_run_pages_link_back(site, read_page):
    sweep = site / "sweep_runs"
    rows = _rows(read_page(sweep / "index.html"))
    single = _cell(rows["pocket-1m", "grpo"], "countdown").find("a")
    assert single.attrs["href"] == "runs/pocket-1m__grpo__s0.html#eval"
    several = _cell(rows["pocket-0.3m", "grpo"], "countdown").find("a")
    assert several.attrs["href"] == f"#seeds-{rows['pocket-0.3m', 'grpo'].attrs['data-row']}"
    page = read_page(sweep / "index.html")
    seeds = page.find("tr", id=several.attrs["href"][1:])
    links = [a.attrs["href"] for a in seeds.find_all("a")]
    assert links == ["runs/pocket-0.3m__grpo__s0.html#eval", "runs/pocket-0.3m__grpo__s1.html#eval"]
    assert "countdown 50.0" in seeds.text and "countdown 60.0" in seeds.text  # each seed's own value
    run = read_page(sweep / "runs" / "pocket-1m__grpo__s0.html")
    final = run.find("table", id="final-eval").find("td", data_col="countdown")
    assert final.text == "40.0" and float(final.attrs["data-value"]) == 40.0
    back = [a for a in run.find_all("a") if a.attrs.get("href", "").startswith("../index.html#row-")]
    assert back and back[0].attrs["href"] == f"../index.html#row-{rows['pocket-1m', 'grpo'].attrs['data-row']}"
    assert '"commit": "0123abc"' in run.text  # provenance from result.json
    missing = read_page(sweep / "runs" / "pocket-1m__clip_cov__s0.html")
    assert "missing" in missing.find("dl", cls="facts").text


def test_run_page_curves_are_drawn_from_its_metrics(site, read_page):
    run = read_page(site / "sweep_runs" / "runs" / "pocket-1m__kl_cov__s0.html")
    charts = {f.attrs["id"]: json.loads(f.find("script", cls="chart-data").text) for f in run.find_all("figure")}
    assert set(charts) == {"curve-reward", "curve-entropy", "curve-covariance", "curve-score"}
    (reward,) = charts["curve-reward"]["series"]
    assert reward["name"] == "reward/mean" and _flat(reward["points"]) == pytest.approx(
        [1, 0.1, 2, 0.2, 3, 0.3, 4, 0.4]
    )
    (score,) = charts["curve-score"]["series"]
    assert _flat(score["points"]) == pytest.approx([0, 20.0, 4, 45.0])  # eval/step_0.json, then the final eval, in %
    names = [s["name"] for s in charts["curve-covariance"]["series"]]
    assert names == ["cov/term", "cov/mean"]
    svg = run.find("figure", id="curve-entropy").find("svg")
    assert len(svg.find_all("polyline")) == 1 and len(svg.find_all("circle")) == 4  # static: readable without JS


def test_run_page_links_its_graded_samples_and_the_data_are_the_graders_verdicts(site, runs_folder, read_page):
    sweep = site / "sweep_runs"
    run = read_page(sweep / "runs" / "pocket-0.3m__grpo__s0.html")
    link = run.find("a", cls="samples-link")
    assert link.attrs["href"] == "../samples.html#suite=pocket_countdown&a=pocket-0.3m__grpo__s0"
    assert (sweep / "samples.html").is_file()
    index = json.loads(read_page(sweep / "samples.html").find("script", id="sample-index").text)
    assert sorted(e["run"] for e in index) == ["pocket-0.3m__grpo__s0", "pocket-0.3m__kl_cov__s0"]
    js = (sweep / "samples" / "pocket-0.3m__grpo__s0__pocket_countdown.js").read_text()
    data = json.loads(js.split("] = ", 1)[1].rstrip().rstrip(";"))
    graded = [
        json.loads(x)
        for x in (runs_folder / "pocket-0.3m__grpo__s0" / "eval" / "samples" / "pocket_countdown.graded.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(data["rows"]) == 12 and sum(r[3] for r in data["rows"]) == 3  # right: problems 0, 1 and 3, sample 0
    for (pid, sample, response, correct, _pred, reason), g in zip(data["rows"], graded):
        assert (pid, sample, response, correct, reason) == (
            g["id"],
            g["sample"],
            g["response"],
            g["correct"],
            g["reason"],
        )
        assert data["problems"][pid] == {"prompt": g["problem_data"]["prompt"], "gold": g["answer"]}
    entry = next(e for e in index if e["run"] == "pocket-0.3m__grpo__s0")
    assert (entry["rows"], entry["correct"], entry["problems"]) == (12, 3, 6)


def test_a_committed_results_folder_shows_its_csv_says_it_has_no_runs_and_keeps_figures_small(tmp_path, read_page):
    site = build_site([ROOT / "results" / "quickstart"], tmp_path / "site")
    page = read_page(site / "quickstart" / "index.html")
    csv = pd.read_csv(ROOT / "results" / "quickstart" / "leaderboard.csv")
    rows = _rows(page)
    assert len(rows) == len(csv) == 14
    for r in csv.itertuples():
        td = _cell(rows[r.model, r.method], "countdown")
        interval = f" ± {r.countdown_ci:.1f}" if r.countdown_n > 1 else ""
        assert td.text == f"{r.countdown_mean:.1f}{interval} (n={r.countdown_n})" and not td.find_all("a")  # no runs
        delta = _cell(rows[r.model, r.method], "delta_avg_suites")
        assert delta.text.startswith(f"{r.delta_avg_suites:+.1f}")
        assert (" ± " in delta.text) == (r.method != "grpo" and r.countdown_n > 1)  # the paired Δ carries its CI
    assert "not the runs behind them (runs/quickstart)" in page.find("p", cls="notice").text
    assert not page.find_all("strong")  # 3 seeds: nothing marked (clip_cov's Δ interval excludes 0: not bold)
    assert not page.find_all("select", name="metric")  # the committed csv holds one metric
    assert "Δ avg (suites) vs grpo" in page.text
    assert any("95% Student-t CI over seeds" in li.text for li in page.find("ul", cls="notes").find_all("li"))
    figs = sorted((site / "quickstart" / "figures").iterdir())
    assert [f.name for f in figs] == sorted(p.name for p in (ROOT / "results" / "quickstart").glob("*.png"))
    assert all(f.stat().st_size < 150_000 for f in figs)


def test_the_committed_example_site_is_small_and_matches_the_committed_leaderboards(read_page):
    site = ROOT / "results" / "site"
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    assert size < 2_000_000, size
    for name in ("quickstart", "mechanism"):
        csv = pd.read_csv(ROOT / "results" / name / "leaderboard.csv")
        rows = read_page(site / name / "index.html").find_all("tr", cls="lb-row")
        assert len(rows) == len(csv), f"results/site/{name} is stale: regenerate it (docs/site.md)"
        for tr, r in zip(rows, csv.itertuples()):
            td = tr.find("td", data_col="avg_samples")
            assert float(td.attrs["data-value"]) == pytest.approx(r.avg_samples_mean, abs=0), name
    assert (site / "quickstart_samples" / "samples.html").is_file()


SITE_SOURCES = ["results/quickstart", "results/mechanism", "results/quickstart_samples"]  # docs/site.md's command


def test_the_committed_example_site_is_what_the_builder_writes(tmp_path, monkeypatch):
    """results/site is a build product: every page and asset (site.js and site.css are the builder's copies of
    harness/site/assets) is byte for byte what `harness site` writes from the committed results; a hand edit, or a
    changed asset or results folder without a rebuild, fails here. It is rebuilt from copies of the results
    folders laid out as in the repository; the downscaled PNG figures are compared by name (Pillow's encoder may
    differ between versions)."""
    for src in SITE_SOURCES:
        shutil.copytree(ROOT / src, tmp_path / src)
    monkeypatch.chdir(tmp_path)
    command = "harness site " + " ".join(SITE_SOURCES) + " --out results/site"
    fresh = build_site(SITE_SOURCES, Path("results/site"), command=command).absolute()
    committed = ROOT / "results" / "site"

    def files(root):
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    assert files(committed) == files(fresh)
    for name in files(committed):
        if not name.endswith(".png"):
            assert (committed / name).read_bytes() == (fresh / name).read_bytes(), f"results/site/{name} is stale"
    for name in ("site.js", "site.css"):
        assert (committed / "assets" / name).read_bytes() == (ROOT / "harness" / "site" / "assets" / name).read_bytes()


def test_out_folder_rules(runs_folder, tmp_path):
    other = tmp_path / "notasite"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and not a site written by harness site"):
        build_site([runs_folder], other)
    assert (other / "keep.txt").read_text() == "mine"
    out = build_site([runs_folder], tmp_path / "site")
    own = json.loads((out / ".harness-site").read_text())["files"]
    assert own == sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".harness-site")
    (out / "stale.html").write_text("mine")  # a file the user added: a rebuild replaces only its own files
    (out / "sweep_runs" / "notes").mkdir()
    (out / "sweep_runs" / "notes" / "n.txt").write_text("mine")
    (out / "sweep_runs" / "index.html").write_text("edited")  # its own file: replaced
    build_site([runs_folder], out)
    assert (out / "stale.html").read_text() == "mine" and (out / "sweep_runs" / "notes" / "n.txt").read_text() == "mine"
    assert (out / "sweep_runs" / "index.html").read_text() != "edited" and (out / "index.html").is_file()
    assert json.loads((out / ".harness-site").read_text())["files"] == own
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.")]  # no temporary folder left
    (out / "stale.html").unlink()
    (out / "sweep_runs" / "runs").rename(tmp_path / "moved")  # in the way of the site's run pages: a user's file
    (out / "sweep_runs" / "runs").write_text("mine")
    with pytest.raises(ValueError, match="runs was not written by harness site and the new site writes"):
        build_site([runs_folder], out)
    assert (out / "sweep_runs" / "runs").read_text() == "mine"
    (out / ".harness-site").write_text("written by harness site; this folder is replaced when the site is rebuilt\n")
    with pytest.raises(ValueError, match="lists no files"):  # an older site: its files cannot be told from yours
        build_site([runs_folder], out)
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        build_site([runs_folder], afile)


def test_bad_inputs_are_named(tmp_path, runs_folder):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        build_site([tmp_path / "nope"], tmp_path / "s1")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="neither a results folder"):
        build_site([empty], tmp_path / "s2")
    graded = runs_folder / "pocket-0.3m__grpo__s0" / "eval" / "samples" / "pocket_countdown.graded.jsonl"
    graded.write_text(graded.read_text() + "{torn\n")
    with pytest.raises(ValueError, match=r"pocket_countdown.graded.jsonl:13: not valid JSON"):
        build_site([runs_folder], tmp_path / "s3")
    assert not (tmp_path / "s3").exists()


def test_cli_writes_the_site_and_errors_in_one_line(tmp_path, runs_folder):
    out = tmp_path / "site"
    ok = subprocess.run(
        [sys.executable, "-m", "harness", "site", str(runs_folder), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (out / "index.html").is_file() and (out / "sweep_runs" / "index.html").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "harness", "site", str(tmp_path / "nope"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [f"error: no such folder: {tmp_path / 'nope'}"]


def test_serve_answers_on_localhost(site):
    server = make_server(site, port=0)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sweep_runs/index.html", timeout=10) as r:
            assert r.status == 200 and b'id="leaderboard"' in r.read()
    finally:
        server.shutdown()
        server.server_close()


def test_nice_ticks_by_hand():
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3, 47) == [10, 20, 30, 40]
    assert nice_ticks(-0.013, 0.004) == [-0.01, -0.005, 0]  # step 0.005 (0.017 / 5 = 0.0034); 0.005 > hi


def test_two_protocols_of_one_suite_give_no_leaderboard_but_run_pages_unless_allowed(tmp_path, runs_folder, read_page):
    p = runs_folder / "pocket-1m__grpo__s0" / "result.json"
    res = json.loads(p.read_text())
    res["eval"]["suites"]["countdown"]["n_samples"] = 4  # another protocol for this run's countdown
    p.write_text(json.dumps(res))
    site = build_site([runs_folder], tmp_path / "site")
    page = read_page(site / "sweep_runs" / "index.html")
    assert not page.find_all("table", id="leaderboard")
    assert "No leaderboard: suite 'countdown' was evaluated under 2 different protocols" in page.text
    assert (site / "sweep_runs" / "runs" / "pocket-1m__grpo__s0.html").is_file()
    site = build_site([runs_folder], tmp_path / "site", allow_mixed_protocols=True)
    head = read_page(site / "sweep_runs" / "index.html").find("table", id="leaderboard").find("thead").text
    assert "countdown [avg@2 | problems=125,n=2," in head and "countdown [avg@2 | problems=125,n=4," in head


def test_an_eval_folder_is_a_run_and_a_math_rows_prompt_comes_from_its_generations(tmp_path, read_page):
    out = tmp_path / "evals" / "base"
    out.mkdir(parents=True)
    result = {
        "suite": "math500",
        "n_problems": 2,
        "n_samples": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 64,
        "metrics": {"avg@1": 0.5},
        "primary": "avg@1",
    }
    (out / "results.json").write_text(json.dumps({"suites": {"math500": result}, "model": "base-model"}))
    rows = [
        {
            "id": "p1",
            "answer": "2",
            "sample": 0,
            "response": "\\boxed{2}",
            "correct": True,
            "pred": "2",
            "reason": "correct",
        },
        {
            "id": "p2",
            "answer": "5",
            "sample": 0,
            "response": "no idea",
            "correct": False,
            "pred": None,
            "reason": "no_box",
        },
    ]
    (out / "math500.graded.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gens = [{"id": "p1", "sample": 0, "prompt": "What is 1+1?", "response": "\\boxed{2}"}]
    (out / "math500.generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gens))
    site = build_site([tmp_path / "evals"], tmp_path / "site")
    page = read_page(site / "evals" / "index.html")
    (row,) = page.find_all("tr", cls="lb-row")
    assert row.attrs["data-method"] == "eval-only" and _cell(row, "math500").text == "50.0 (n=1)"
    js = (site / "evals" / "samples" / "base__math500.js").read_text()
    data = json.loads(js.split("] = ", 1)[1].rstrip().rstrip(";"))
    assert data["problems"] == {"p1": {"prompt": "What is 1+1?", "gold": "2"}, "p2": {"prompt": None, "gold": "5"}}
    assert data["rows"][1] == ["p2", 0, "no idea", False, None, "no_box"]
    index = json.loads(read_page(site / "evals" / "samples.html").find("script", id="sample-index").text)
    assert index[0]["label"] == "eval-only · base-model (base)"  # no seed shown for an eval folder
