"""The report in a real browser: headless Chromium (Debian's, driven by Playwright) opens a
result's report served by the real server and finds one timeline bar per kernel, the roofline,
laid-out dataflow graphs, no console error and no request beyond the page itself."""
from __future__ import annotations

import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright
from report_example import HARDWARE

pytestmark = pytest.mark.integration

# The distribution's browser (make install puts it there); Playwright must not fetch its own.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HANG_GUARD_MS = 300_000  # for every page step: a loaded machine takes its time; this is not a timing


def test_report_shows_a_bar_per_kernel_and_laid_out_graphs_without_errors_or_network(server_url, program,
                                                                                     tmp_path):
    answer = httpx.post(f"{server_url}/v1/optimize", json={"program": program, "hardware": HARDWARE},
                        timeout=120)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    url = f"{server_url}/v1/results/{result['id']}/report"
    problems, requested = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(HANG_GUARD_MS)
            page.set_default_navigation_timeout(HANG_GUARD_MS)
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("request", lambda request: requested.append(request.url))
            assert page.goto(url).status == 200
            for chart in ("timeline", "roofline"):
                page.wait_for_selector(f"#{chart}[data-rendered=true]")
            bars = page.locator("#timeline .mark-rect path")
            assert bars.count() == len(result["kernels"]) + (result["estimate"]["dispatch_s"] > 0)  # + the dispatch
            assert all(bars.nth(i).bounding_box()["width"] > 0 for i in range(bars.count()))
            assert page.locator("#roofline .mark-symbol path").count() >= 1
            for figure, kernels in (("after", result["kernels"] + result["precompute_kernels"]),
                                    ("before", result["baseline_kernels"])):
                graph = page.locator(f"#dataflow-{figure} svg")
                assert graph.bounding_box()["width"] > 100 and graph.bounding_box()["height"] > 100
                titles = graph.locator("g.node > title").all_text_contents()
                assert sum(t[0] in "kp" and t[1:].isdigit() for t in titles) == len(kernels)
                assert graph.locator("g.edge").count() >= len(kernels)
            screenshot = tmp_path / "report.png"
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert requested == [url], "the report fetched something beyond itself"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
