"""The HTML report in a real browser: Debian's chromium, headless, driven by selenium and chromium-driver.

Skipped, with the command that installs them, where chromium or chromedriver is missing;
under ``CI=true`` (``.ci/run`` installs both) a missing one fails instead (``_browser.py``).
Every wait is bounded. Set ``SHAPEWATCH_SCREENSHOT=path.png`` to keep the screenshot
(docs/report.png is made this way).
"""

import json
import os
import shutil

import pytest
from _browser import chromium, missing, required
from _html_storm import HOSTILE_TEXT, misses_of, record_storm, with_hostile_text

from shapewatch._reports.html import report_view, to_html
from shapewatch._reports.merge import merge_dicts

MISSING = missing()
if MISSING is not None:
    if required():
        pytest.fail(f"{MISSING}; under CI=true the browser tests must run", pytrace=False)
    pytest.skip(MISSING, allow_module_level=True)
CHROMIUM = chromium()

from selenium import webdriver  # noqa: E402  (a test dependency: pip install -e .[test])
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WAIT_S = 30


@pytest.fixture(scope="module")
def browser():
    driver_path = shutil.which("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1200,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def storm():
    return with_hostile_text(record_storm())


def open_page(browser, tmp_path, data, name="report.html"):
    path = tmp_path / name
    path.write_text(to_html(data))
    browser.get(path.as_uri())
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    browser.get_log("browser")  # (start each page with an empty console)
    return path


def count(browser, selector):
    return browser.execute_script("return document.querySelectorAll(arguments[0]).length", selector)


def console_problems(browser):
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def test_the_page_renders_without_console_errors_with_a_bar_per_function_and_a_mark_per_miss(browser, storm, tmp_path):
    open_page(browser, tmp_path, storm)
    browser.refresh()  # load again with the console listening from the first line
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    assert console_problems(browser) == []
    assert count(browser, "g.fn-row") == len(storm["functions"]) == 3
    assert count(browser, "g.fn-row rect.seg") == 3 * len(storm["functions"])
    # data-tip is set by the page's script: a mark that has one proves the script ran (the CSP allowed it).
    assert count(browser, "rect.mark[data-tip]") == misses_of(storm)
    boundaries = sum(len(c["boundaries"]) for f in report_view(storm)["functions"] for c in f["causes"])
    assert count(browser, "line.boundary") == boundaries > 0
    assert count(browser, "#miss-table tbody tr") == misses_of(storm)
    sizes = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg[role=img]')).map(s => s.getBoundingClientRect().width)")
    assert sizes and min(sizes) > 100
    assert browser.execute_script("return window.__pwned === undefined && !document.querySelector('img')")


def test_hovering_a_mark_shows_its_explanation_call_site_and_cost_as_text(browser, storm, tmp_path):
    open_page(browser, tmp_path, storm)
    html_miss = next(f for f in storm["functions"] if f["misses"][-1]["explanation"] == HOSTILE_TEXT)["misses"][-1]
    mark = browser.find_element(By.CSS_SELECTOR, f'rect.mark[data-seq="{html_miss["seq"]}"]')
    tip = browser.find_element(By.CSS_SELECTOR, ".sw-tip")
    assert not tip.is_displayed()
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", mark)
    ActionChains(browser).move_to_element(mark).perform()
    WebDriverWait(browser, WAIT_S).until(lambda d: tip.is_displayed())
    lines = tip.text.splitlines()
    assert lines[0].startswith(f"#{html_miss['seq']} ") and HOSTILE_TEXT in lines  # shown as text, not run
    assert f"call site: {HOSTILE_TEXT}:1" in lines and lines[-1].startswith("cost: ")
    assert browser.execute_script("return window.__pwned === undefined && !document.querySelector('img')")
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    WebDriverWait(browser, WAIT_S).until(lambda d: not tip.is_displayed())
    assert console_problems(browser) == []


def test_clicking_a_column_sorts_the_misses_and_clicking_again_reverses_them(browser, storm, tmp_path):
    open_page(browser, tmp_path, storm)
    total = browser.find_element(By.XPATH, "//table[@id='miss-table']//th[text()='total']")
    seq = browser.find_element(By.XPATH, "//table[@id='miss-table']//th[text()='#']")

    def column(i):
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('#miss-table tbody tr'))"
            ".map(r => parseFloat(r.cells[arguments[0]].getAttribute('data-v')))", i)

    seqs = sorted(m["seq"] for f in storm["functions"] for m in f["misses"])
    assert column(0) == seqs
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", total)
    total.click()
    assert total.get_attribute("aria-sort") == "ascending" and column(8) == sorted(column(8))
    total.click()
    assert total.get_attribute("aria-sort") == "descending" and column(8) == sorted(column(8), reverse=True)
    seq.click()
    assert column(0) == seqs and total.get_attribute("aria-sort") is None
    assert console_problems(browser) == []


def test_a_merged_report_shows_divergences_first_and_marks_the_odd_process(browser, storm, tmp_path):
    other = json.loads(json.dumps(storm))
    other["environment"]["process_index"] = 1
    step = next(f for f in other["functions"] if f["function"] == "train_step")
    step["compiles"] += 1
    step["misses"][-1]["signature"]["arrays"][-1]["shape"][1] += 1
    open_page(browser, tmp_path, merge_dicts([("r0.json", storm), ("r1.json", other)]), "merged.html")
    browser.refresh()
    WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return document.readyState") == "complete")
    assert console_problems(browser) == []
    order = browser.execute_script("return Array.from(document.querySelectorAll('section')).map(s => s.id)")
    assert order == ["divergences", "per-process", "processes"]
    assert count(browser, "#divergence-table tbody tr") == 2
    heads = browser.execute_script(
        "return Array.from(document.querySelectorAll('#process-table th')).map(t => t.textContent)")
    assert heads == ["function", "compiles", "seconds", "p0", "p1"]
    assert count(browser, "#process-table .differs") == 2  # train_step: 11 in one process, 12 in the other


def test_the_screenshot_of_a_real_report_is_saved(browser, tmp_path):
    data = record_storm(hostile=False)
    open_page(browser, tmp_path, data)
    browser.set_window_size(1200, 1560)
    update = next(f for f in data["functions"] if f["function"] == "update")
    mark = browser.find_element(By.CSS_SELECTOR, f'rect.mark[data-seq="{update["misses"][1]["seq"]}"]')
    ActionChains(browser).move_to_element(mark).perform()  # show one tooltip in the picture
    WebDriverWait(browser, WAIT_S).until(lambda d: d.find_element(By.CSS_SELECTOR, ".sw-tip").is_displayed())
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    keep = os.environ.get("SHAPEWATCH_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
    browser.set_window_size(1200, 1000)
    assert console_problems(browser) == []
