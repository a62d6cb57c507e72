"""The planner page in a real browser (issue 64): headless Chromium (Debian's chromium and chromium-driver packages)
driven by Selenium fills the form, reads the table and checks it against ``trainingcost.plan`` and the command line,
follows a shared link, enters a bad value, and saves screenshots.

CI installs the browser (.ci/run) and sets TRAININGCOST_REQUIRE_BROWSER=1, so that a missing browser fails there;
elsewhere the test is skipped with its reason. TRAININGCOST_SCREENSHOT=DIR also writes the screenshots into DIR (the
README's is docs/page.png)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainingcost
from web_server import TOKEN, served

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

if not (BROWSER and DRIVER):
    reason = "headless Chromium and its driver are not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("TRAININGCOST_REQUIRE_BROWSER"):
        raise RuntimeError(f"TRAININGCOST_REQUIRE_BROWSER is set, but {reason}")
    pytest.skip(reason, allow_module_level=True)

from selenium import webdriver  # noqa: E402 - the dev extra
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


def browser(tmp_path: Path, name: str):
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1900", f"--user-data-dir={tmp_path / name}", "--no-first-run"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def settled(driver, state: str = "ready", timeout: float = 120) -> None:
    """Wait until the page shows the answer to what its form (and its address) now says."""
    def done(d):  # (the address also holds the token, which the form does not)
        return d.execute_script("const shown = new URLSearchParams(location.search); shown.delete('token');"
                                "return document.body.dataset.state === arguments[0] && "
                                "document.body.dataset.query === query().toString() && "
                                "shown.toString() === query().toString()", state)
    WebDriverWait(driver, timeout, poll_frequency=0.1).until(done)


def page_table(driver) -> tuple[list[str], list[list[str]]]:
    return tuple(driver.execute_script(  # in one step: the table as it stands
        "const t = document.getElementById('plan-table');"
        "return [[...t.tHead.rows[0].cells].map(c => c.textContent),"
        "        [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent))];"))


def typed(driver, name: str, text: str) -> None:
    field = driver.find_element(By.NAME, name)
    field.clear()
    field.send_keys(text)


def rules(driver, wanted: set[str]) -> None:
    for box in driver.find_elements(By.CSS_SELECTOR, "input.rule"):
        if box.is_selected() != (box.get_attribute("value") in wanted):
            box.click()


def printed_rows(*flags: str) -> list[list[str]]:
    out = subprocess.run([sys.executable, "-m", "trainingcost", "plan", *flags], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return [re.split(r"\s{2,}", line.strip()) for line in out.stdout.splitlines()]


def screenshot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    if os.environ.get("TRAININGCOST_SCREENSHOT"):
        shutil.copy(path, Path(os.environ["TRAININGCOST_SCREENSHOT"]) / name)
    return path


def test_the_page_in_a_browser(tmp_path):
    with served("--workers", "2", "--time-limit", "600") as base:
        driver = browser(tmp_path, "first")
        try:
            driver.get(f"{base}/?token={TOKEN}")
            WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "input.rule"))
            # no cookie (a cookie of 127.0.0.1 reaches every port there); the page opens on a prompt, not an error
            assert driver.get_cookies() == []
            assert driver.find_element(By.ID, "status").text.startswith("choose a preset")

            # The README's first example, typed into the form.
            Select(driver.find_element(By.NAME, "preset")).select_by_value("llama-3-8b")
            typed(driver, "tokens", "1e12")
            Select(driver.find_element(By.NAME, "gpu")).select_by_value("h100-sxm")
            typed(driver, "gpus", "64")
            rules(driver, {"bp", "fa", "dfa", "pepita", "mempepita"})
            settled(driver)
            header, rows = page_table(driver)
            api = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64,
                                    rule=["bp", "fa", "dfa", "pepita", "mempepita"])
            assert header == list(api.cells.columns) and rows == api.cells.values.tolist()
            cli = printed_rows("--preset", "llama-3-8b", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "64",
                               "--rule", "bp,fa,dfa,pepita,mempepita")
            assert all(row in cli for row in rows)  # the command line's table, cell for cell
            assert len(driver.find_elements(By.CSS_SELECTOR, "#memory svg rect")) >= 5 * 4
            assert driver.find_element(By.ID, "cli").text == ("trainingcost plan --preset llama-3-8b --tokens 1e12 "
                                                              "--gpu h100-sxm --gpus 64 --rule "
                                                              "bp,pepita,mempepita,fa,dfa")
            screenshot(driver, tmp_path, "page.png")

            # Fewer rules and a range of GPU counts, each at its best layout.
            rules(driver, {"bp", "fa", "dfa"})
            typed(driver, "gpus", "64-256x2")
            Select(driver.find_element(By.NAME, "layout")).select_by_value("search")
            settled(driver)
            header, rows = page_table(driver)
            api = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus="64-256x2",
                                    layout="search", rule=["bp", "fa", "dfa"])
            assert header[:3] == ["rule", "GPUs", "layout"] and rows == api.cells.values.tolist() and len(rows) == 9
            assert driver.find_element(By.ID, "scaling-block").is_displayed()
            assert len(driver.find_elements(By.CSS_SELECTOR, "#scaling svg")) == 3  # two panels, a legend
            assert len(driver.find_elements(By.CSS_SELECTOR, "#scaling svg polyline")) == 2 * 3
            screenshot(driver, tmp_path, "page-scaling.png")
            share = driver.find_element(By.ID, "share").get_attribute("value")
            assert "gpus=64-256x2" in share and f"token={TOKEN}" in share

            # A bad value: the command line's one line, next to its field; the field marked.
            typed(driver, "gpus", "0")
            settled(driver, "error")
            message = driver.find_element(By.CSS_SELECTOR, '.error[data-for="gpus"]').text
            assert message == "trainingcost plan: error: argument --gpus: must be a positive integer (got 0)"
            assert "invalid" in driver.find_element(By.NAME, "gpus").get_attribute("class")
            screenshot(driver, tmp_path, "page-error.png")
        finally:
            driver.quit()

        # The shared link, in a browser that has never seen the server: the same plan.
        other = browser(tmp_path, "second")
        try:
            other.get(share)
            settled(other)
            assert page_table(other) == (header, rows)
            assert other.find_element(By.NAME, "gpus").get_attribute("value") == "64-256x2"
            assert Select(other.find_element(By.NAME, "layout")).first_selected_option.get_attribute("value") == "search"
            checked = {b.get_attribute("value") for b in other.find_elements(By.CSS_SELECTOR, "input.rule")
                       if b.is_selected()}
            assert checked == {"bp", "fa", "dfa"}
        finally:
            other.quit()
