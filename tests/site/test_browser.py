"""The site in a real browser: headless Debian chromium driven by selenium through the system chromedriver
(scripts/ci_browser.sh installs both; nothing is downloaded at run time). Marker ``browser``, deselected by default:

    .venv/bin/python -m pytest -m browser tests/site

Checks what a user does: every page loads with no console error, sorting and filtering change the rows, a
leaderboard cell leads to its run page and a run page to its graded samples, the numbers on the pages equal the
leaderboard csv, charts answer hover and legend clicks. Saves the leaderboard screenshot docs/img/site.png."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from harness.site import build_site
from harness.site.sources import leaderboard_columns

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]
QS_SAMPLES = ROOT / "results" / "quickstart_samples"
GRPO = "pocket-0.3m__grpo__s0__cb74242b0e55"
KLCOV = "pocket-0.3m__kl_cov__s0__9d1bcb6e5461"


@pytest.fixture(scope="module")
def driver():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} is missing: run scripts/ci_browser.sh (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[browser]'")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium manager never downloads a browser or driver
    profile = tempfile.mkdtemp(prefix="site-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory, make_runs):
    """The committed quickstart folder, the committed quickstart cells with samples, the conftest runs folder, and
    a copy of it whose pocket-1m runs were also scored on a second suite (for the suite filter)."""
    tmp = tmp_path_factory.mktemp("browser")
    runs = make_runs(tmp / "sweep_runs")
    two = make_runs(tmp / "two_suites")
    for name in ("pocket-1m__grpo__s0", "pocket-1m__kl_cov__s0"):
        p = two / name / "result.json"
        res = json.loads(p.read_text())
        res["eval"]["suites"]["arith"] = {**res["eval"]["suites"]["countdown"], "suite": "arith"}
        p.write_text(json.dumps(res))
    return build_site([ROOT / "results" / "quickstart", QS_SAMPLES, runs, two], tmp / "site")


def _open(driver, path: Path, fragment: str = ""):
    driver.get(path.resolve().as_uri() + fragment)
    _wait(driver, lambda d: d.execute_script("return document.readyState") == "complete")


def _wait(driver, cond, timeout=15):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(cond)


def _errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _rows(driver, visible_only=True):
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr.lb-row")
    return [r for r in rows if r.is_displayed()] if visible_only else rows


def _select(driver, name: str, value: str, form="#lb-filters"):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.CSS_SELECTOR, f"{form} select[name={name}]")).select_by_value(value)


def _th(driver, col: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f'#leaderboard thead th[data-col="{col}"]')


def test_every_page_loads_without_console_errors(driver, site):
    pages = sorted(site.rglob("*.html")) + sorted((ROOT / "results" / "site").rglob("*.html"))
    assert len(pages) >= 20
    for page in pages:
        driver.get_log("browser")  # drop what came before
        _open(driver, page)
        assert _errors(driver) == [], page
        if (page.parent / "leaderboard.csv").is_file() and page.name == "index.html":
            count = driver.find_element("css selector", "#lb-filters .count").text
            assert count.endswith("rows shown"), page  # the script ran


def test_sorting_orders_rows_by_the_clicked_column(driver, site):
    _open(driver, site / "quickstart" / "index.html")
    csv = pd.read_csv(ROOT / "results" / "quickstart" / "leaderboard.csv")
    before = [r.get_attribute("data-method") for r in _rows(driver)]
    _th(driver, "countdown").click()
    values = [
        float(r.find_element("css selector", 'td[data-col="countdown"]').get_attribute("data-value"))
        for r in _rows(driver)
    ]
    assert values == sorted(csv["countdown_mean"], reverse=True)  # first click: highest first
    assert [r.get_attribute("data-method") for r in _rows(driver)] != before
    _th(driver, "countdown").click()
    values = [
        float(r.find_element("css selector", 'td[data-col="countdown"]').get_attribute("data-value"))
        for r in _rows(driver)
    ]
    assert values == sorted(csv["countdown_mean"])
    assert _th(driver, "countdown").get_attribute("aria-sort") == "ascending"
    assert _errors(driver) == []


def test_filters_by_size_method_and_suite_change_the_rows(driver, site):
    _open(driver, site / "quickstart" / "index.html")
    assert len(_rows(driver)) == 14
    _select(driver, "model", "pocket-1m")
    rows = _rows(driver)
    assert len(rows) == 7 and {r.get_attribute("data-model") for r in rows} == {"pocket-1m"}
    _select(driver, "method", "kl_cov")
    (row,) = _rows(driver)
    csv = pd.read_csv(ROOT / "results" / "quickstart" / "leaderboard.csv").set_index(["model", "method"])
    expected = f"{csv.loc[('pocket-1m', 'kl_cov'), 'countdown_mean']:.1f}"
    assert row.find_element("css selector", 'td[data-col="countdown"] .mean').text == expected
    assert driver.find_element("css selector", "#lb-filters .count").text == "1 of 14 rows shown"
    _select(driver, "model", "")
    assert {r.get_attribute("data-model") for r in _rows(driver)} == {"pocket-0.3m", "pocket-1m"}
    _open(driver, site / "two_suites" / "index.html")
    assert len(_rows(driver)) == 4
    _select(driver, "suite", "arith")
    rows = _rows(driver)
    assert sorted(r.get_attribute("data-method") for r in rows) == ["grpo", "kl_cov"]
    assert {r.get_attribute("data-model") for r in rows} == {"pocket-1m"}
    assert not _th(driver, "countdown").is_displayed() and _th(driver, "arith").is_displayed()
    assert _errors(driver) == []


def test_the_metric_switch_shows_one_metric_at_a_time_with_harness_tables_numbers(driver, site):
    """The committed quickstart cells hold avg@4 and pass@4: the menu shows the pass@4 table (its cells are `harness
    table --metric pass`'s csv) and its notes in place of avg@4's; the size filter applies to the table shown."""
    from selenium.webdriver.common.by import By

    from harness.results.collect import collect
    from harness.results.table import build_leaderboard, to_csv

    expected = pd.read_csv(io.StringIO(to_csv(build_leaderboard(collect([QS_SAMPLES]), metric="pass"))))
    _open(driver, site / "quickstart_samples" / "index.html")
    avg, pas = driver.find_element(By.ID, "leaderboard"), driver.find_element(By.ID, "leaderboard-pass")
    assert avg.is_displayed() and not pas.is_displayed()
    notes = {
        v.get_attribute("data-metric"): v.find_element(By.CSS_SELECTOR, "ul.notes")
        for v in driver.find_elements(By.CSS_SELECTOR, "div.lb-view")
        if v.find_elements(By.CSS_SELECTOR, "ul.notes")
    }
    assert notes["avg"].is_displayed() and not notes["pass"].is_displayed()
    _select(driver, "metric", "pass")
    assert pas.is_displayed() and not avg.is_displayed() and notes["pass"].is_displayed()
    assert not notes["avg"].is_displayed() and "\nMetric: pass@k: unbiased" in notes["pass"].text
    shown = {
        r.get_attribute("data-method"): r.find_element(By.CSS_SELECTOR, 'td[data-col="countdown"]')
        for r in pas.find_elements(By.CSS_SELECTOR, "tr.lb-row")
        if r.is_displayed()
    }
    assert sorted(shown) == sorted(expected["method"])
    for r in expected.itertuples():
        td = shown[r.method]
        assert float(td.get_attribute("data-value")) == r.countdown_mean
        assert td.find_element(By.CSS_SELECTOR, ".mean").text == f"{r.countdown_mean:.1f}"
    assert expected.set_index("method").at["grpo", "countdown_mean"] == pytest.approx(68.0)  # result.json's pass@4
    _select(driver, "method", "kl_cov")
    assert [
        r.get_attribute("data-method") for r in pas.find_elements(By.CSS_SELECTOR, "tr.lb-row") if r.is_displayed()
    ] == ["kl_cov"]
    assert driver.find_element(By.CSS_SELECTOR, "#lb-filters .count").text == "1 of 2 rows shown"
    _select(driver, "metric", "avg")
    assert avg.is_displayed() and not pas.is_displayed()
    assert _errors(driver) == []


def test_a_cell_leads_to_its_run_page_and_the_run_page_to_its_samples(driver, site):
    from selenium.webdriver.common.by import By

    csv = pd.read_csv(site / "quickstart_samples" / "leaderboard.csv")
    _open(driver, site / "quickstart_samples" / "index.html")
    row = next(r for r in _rows(driver) if r.get_attribute("data-method") == "grpo")
    row.find_element(By.CSS_SELECTOR, 'td[data-col="countdown"] a').click()
    _wait(driver, lambda d: d.current_url.endswith(f"runs/{GRPO}.html#eval"))
    assert driver.find_element(By.TAG_NAME, "h1").text == GRPO
    final = driver.find_element(By.CSS_SELECTOR, '#final-eval td[data-col="countdown"]').text
    assert final == f"{csv.loc[csv['method'] == 'grpo', 'countdown_mean'].item():.1f}" == "63.0"
    driver.find_element(By.CSS_SELECTOR, "a.samples-link").click()
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "article.problem")) > 0)
    assert "samples.html#" in driver.current_url
    assert driver.find_element(By.CSS_SELECTOR, "#sample-controls select[name=a]").get_attribute("value") == GRPO
    graded = [
        json.loads(x) for x in gzip.open(QS_SAMPLES / GRPO / "eval" / "samples" / "countdown.graded.jsonl.gz", "rt")
    ]
    n_right = sum(g["correct"] for g in graded)
    assert driver.find_element(By.CSS_SELECTOR, "p.summary").text.startswith(
        f"40 of 40 problems shown ({len(graded)} samples)"
    )
    first = driver.find_element(By.CSS_SELECTOR, "article.problem")
    assert first.find_element(By.CSS_SELECTOR, "pre.prompt").text == graded[0]["problem_data"]["prompt"]
    assert first.find_element(By.CSS_SELECTOR, "pre.gold").text == graded[0]["answer"]
    for value, expect, n in (("wrong", "false", len(graded) - n_right), ("right", "true", n_right)):
        _select(driver, "filter", value, form="#sample-controls")
        shown = driver.find_elements(By.CSS_SELECTOR, ".sample")
        assert {s.get_attribute("data-correct") for s in shown} == {expect}
        assert driver.find_element(By.CSS_SELECTOR, "p.summary").text.split("(")[1].startswith(f"{n} samples")
    _select(driver, "b", KLCOV, form="#sample-controls")
    _select(driver, "filter", "a_better", form="#sample-controls")
    arts = driver.find_elements(By.CSS_SELECTOR, "article.problem")
    assert arts and all(len(a.find_elements(By.CSS_SELECTOR, "section.run-col")) == 2 for a in arts)
    for a in arts:  # "A 4/4 right, B 0/4 right"
        acc = a.find_element(By.CSS_SELECTOR, ".acc").text.replace(",", "").split()
        assert int(acc[1].split("/")[0]) > int(acc[4].split("/")[0])
    assert f"b={KLCOV}" in driver.current_url and "filter=a_better" in driver.current_url
    assert _errors(driver) == []


def test_a_cell_of_several_seeds_opens_the_list_of_its_runs(driver, site):
    from selenium.webdriver.common.by import By

    _open(driver, site / "sweep_runs" / "index.html")
    row = next(
        r
        for r in _rows(driver)
        if r.get_attribute("data-model") == "pocket-0.3m" and r.get_attribute("data-method") == "grpo"
    )
    seeds = driver.find_element(By.ID, f"seeds-{row.get_attribute('data-row')}")
    assert not seeds.is_displayed()
    row.find_element(By.CSS_SELECTOR, 'td[data-col="countdown"] a').click()
    _wait(driver, lambda d: seeds.is_displayed())
    seeds.find_element(By.LINK_TEXT, "pocket-0.3m__grpo__s1").click()
    _wait(driver, lambda d: d.current_url.endswith("runs/pocket-0.3m__grpo__s1.html#eval"))
    assert driver.find_element(By.CSS_SELECTOR, '#final-eval td[data-col="countdown"]').text == "60.0"


def test_numbers_on_the_pages_equal_the_leaderboard_csv(driver, site):
    cases = [
        (site / "quickstart", ROOT / "results" / "quickstart" / "leaderboard.csv"),
        (site / "sweep_runs", site / "sweep_runs" / "leaderboard.csv"),
        (ROOT / "results" / "site" / "mechanism", ROOT / "results" / "mechanism" / "leaderboard.csv"),
    ]
    for folder, csv_path in cases:
        _open(driver, folder / "index.html")
        csv = pd.read_csv(csv_path)
        cols = leaderboard_columns(csv)  # the score columns (the entropy columns are not shown on the site)
        shown = driver.execute_script(
            "return Array.from(document.querySelectorAll('#leaderboard tr.lb-row')).map(function (tr) {"
            "  var o = {}; tr.querySelectorAll('td[data-col]').forEach(function (td) {"
            "    var m = td.querySelector('.mean'); o[td.dataset.col] = [td.dataset.value, m ? m.textContent : '']; });"
            "  return o; });"
        )
        assert len(shown) == len(csv)
        for cells, (_, r) in zip(shown, csv.iterrows()):
            for c in cols:
                value, text = cells[c]
                if pd.isna(r[f"{c}_mean"]):
                    assert value == "" and text == ""
                else:
                    assert float(value) == r[f"{c}_mean"] and text == f"{r[f'{c}_mean']:.1f}", (folder, c)
            for a in ("avg_suites", "avg_samples"):
                value, text = cells[f"delta_{a}"]
                if pd.notna(r[f"delta_{a}"]):
                    assert float(value) == r[f"delta_{a}"] and text == f"{r[f'delta_{a}']:+.1f}"


def test_chart_hover_shows_the_logged_value_and_legend_toggles_a_series(driver, site):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    _open(driver, site / "quickstart_samples" / "runs" / f"{GRPO}.html")
    fig = driver.find_element(By.ID, "curve-entropy")
    svg = fig.find_element(By.TAG_NAME, "svg")
    tip = fig.find_element(By.CSS_SELECTOR, ".tooltip")
    assert not tip.is_displayed()
    ActionChains(driver).move_to_element(svg).perform()
    _wait(driver, lambda d: tip.is_displayed())
    lines = tip.text.splitlines()
    step = int(float(lines[0].split()[-1]))
    metrics = {r["step"]: r for r in map(json.loads, (QS_SAMPLES / GRPO / "metrics.jsonl").read_text().splitlines())}
    entropy_line = next(x for x in lines[1:] if x.startswith("entropy: "))
    assert float(entropy_line.split(": ")[1]) == pytest.approx(metrics[step]["entropy"], rel=1e-4)
    button = fig.find_element(By.CSS_SELECTOR, ".legend-item[data-series='0']")
    button.click()
    series = fig.find_element(By.CSS_SELECTOR, "g.series[data-series='0']")
    assert button.get_attribute("aria-pressed") == "false" and not series.is_displayed()
    button.click()
    assert button.get_attribute("aria-pressed") == "true" and series.is_displayed()
    assert _errors(driver) == []


def test_screenshot_of_the_committed_leaderboard_page(driver):
    """docs/img/site.png: the committed example's mechanism leaderboard (3 seeds: intervals, n, paired Δ, a flagged
    row), scrolled to the table and palette-quantised to stay small (docs/site.md shows it)."""
    from PIL import Image

    driver.set_window_size(1360, 900)
    _open(driver, ROOT / "results" / "site" / "mechanism" / "index.html")
    driver.execute_script("document.getElementById('leaderboard-title').scrollIntoView()")
    raw = Path(tempfile.mkdtemp()) / "shot.png"
    assert driver.save_screenshot(str(raw))
    out = ROOT / "docs" / "img" / "site.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(raw) as im:
        im.convert("RGB").quantize(colors=64, dither=Image.NONE).save(out, optimize=True)
    assert 5_000 < out.stat().st_size < 250_000
    assert _errors(driver) == []
    driver.set_window_size(1280, 900)


def test_served_over_http_the_pages_work_the_same(driver, site):
    """What ``harness site --serve`` does: the same files over http://127.0.0.1 (no favicon or script errors)."""
    import threading

    from selenium.webdriver.common.by import By

    from harness.site.serve import make_server

    server = make_server(site, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        driver.get_log("browser")
        driver.get(f"{base}/quickstart_samples/samples.html#suite=countdown&a={KLCOV}&filter=right")
        _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".sample")) > 0)
        assert {s.get_attribute("data-correct") for s in driver.find_elements(By.CSS_SELECTOR, ".sample")} == {"true"}
        driver.get(f"{base}/index.html")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#sweeps tbody tr")) == 4
        assert _errors(driver) == []
    finally:
        server.shutdown()
        server.server_close()
