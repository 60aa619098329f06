"""End to end: `nmt-serve` in its own process, the attention explorer page in headless Chromium.

It skips only where no Chromium is installed and the CI variable is unset; `.ci/run` installs the browser.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.test_serve import start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("no chromium binary (apt-get install chromium); CI never skips this", allow_module_level=True)
assert CHROMIUM is not None, "CI: install Debian's chromium package (.ci/run does)"

SENTENCE = "Zwei Hunde spielen im Schnee."


@pytest.mark.slow
def test_page_translates_and_draws_the_heatmap(trained_run):
    import httpx
    from playwright.sync_api import sync_playwright

    process, url = start_server(trained_run)
    try:
        expected = httpx.post(f"{url}/translate", json={"src": [SENTENCE]}).json()["translations"][0]
        rows = len(httpx.post(f"{url}/attention", json={"src": SENTENCE}).json()["tgt"])
        with sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(url)
            page.fill("#src", SENTENCE)
            page.click("#translate")
            page.wait_for_selector("#output li .tgt")
            assert page.inner_text("#output li .tgt") == (expected or "(no translation)")
            page.wait_for_function(f"document.querySelectorAll('#heatmap g.row').length === {rows}")
            cells = page.locator("#heatmap g.row").first.locator("rect.cell").count()
            assert cells == len(page.evaluate("data.src"))
            page.hover("#heatmap g.row rect.cell >> nth=0")
            assert "→" in page.inner_text("#tip")
            assert page.locator("#diagnostics tbody tr").count() == rows
            assert page.locator("#layer option").count() == 2  # the search's weights and the one decoder layer
            page.select_option("#head", "1")
            assert page.locator("#heatmap g.row").count() == rows
            browser.close()
        assert not errors, errors
    finally:
        process.terminate()
        process.wait(30)
