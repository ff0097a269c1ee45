"""The web app in a real headless Chromium against a real `incidentlib serve` process.

Set INCIDENTLIB_SCREENSHOTS=DIR to also save the screenshots that docs/ui.md shows
(light and dark, desktop width).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _server import running_server

pytestmark = [pytest.mark.slow, pytest.mark.browser]
sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
# Flags for a sandboxed, offline machine: no background services that would call out.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
NAVIGATION_TIMEOUT_MS = 180_000
PHONE_WIDTH = 390  # narrowest common phone viewport
FIRST_LOAD_BUDGET = 300 * 1024  # bytes for the first page with everything it loads
SEED_WATCHDOG = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=_ALLGATHER_BASE, "
                 "NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for 600351 milliseconds before timing out")
SCREENSHOTS = os.environ.get("INCIDENTLIB_SCREENSHOTS")


@pytest.fixture(scope="module")
def base_url(search_library: Any, data_dir: Path, cache_dir: Path) -> Iterator[str]:
    with running_server("--data", str(data_dir), "--cache", str(cache_dir)) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: install Debian's chromium package (.ci/run does)")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


class Page:
    """A page with its console errors and network bytes recorded."""

    def __init__(self, browser: Any, width: int = 1280, height: int = 900, scheme: str = "light") -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme,
                                           locale="ko-KR" if scheme == "ko" else "en-US")
        self.page = self.context.new_page()
        # the first visit to /ui/clusters computes the clusters and the map; a busy CI machine needs time
        self.page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self.errors: list[str] = []
        self.bytes = 0
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("requestfinished", self._count)

    def _count(self, request: Any) -> None:
        response = request.response()
        if response is not None:
            self.bytes += len(response.body())

    def close(self) -> None:
        self.context.close()


@pytest.fixture()
def tab(browser: Any) -> Iterator[Page]:
    page = Page(browser)
    yield page
    assert page.errors == [], f"console errors: {page.errors}"
    page.close()


def _shot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=False)


def test_korean_search_as_you_type_finds_imbue_and_its_related_list(tab: Page, base_url: str) -> None:
    page = tab.page
    page.goto(f"{base_url}/?lang=ko")
    page.get_by_label("장애 사례 검색").press_sequentially("NCCL 워치독 타임아웃으로 학습 멈춤", delay=15)
    result = page.locator("#results a[href^='/ui/incidents/IL-0025']").first
    result.wait_for(timeout=60_000)  # arrives without pressing Enter: the search runs as the user types
    assert "q=" in page.url  # the address bar holds the search: shareable
    assert page.locator("#results mark").count() > 0
    _shot(page, "search-ko")
    result.click()
    page.wait_for_url("**/ui/incidents/IL-0025**")
    related = page.locator(".related .shared")
    assert related.count() >= 3
    labels = related.all_inner_texts()
    assert all(label.startswith("같은 원인 · 공통 ") for label in labels)
    assert any("InfiniBand" in label or "NCCL" in label for label in labels)
    _shot(page, "incident-ko")


def test_pasting_the_watchdog_line_shows_imbue_and_nccl(tab: Page, base_url: str) -> None:
    page = tab.page
    page.goto(f"{base_url}/ui/seen?lang=en")
    page.get_by_label("Paste an error, a log excerpt or a description").fill(SEED_WATCHDOG)
    page.get_by_role("button", name="Find similar incidents").click()
    page.wait_for_selector("#h-similar")
    similar_ids = page.locator("#h-similar ~ ol a .id").all_inner_texts()
    assert "IL-0025" in similar_ids[:5]
    diagnosis = page.locator("section[aria-labelledby=h-causes]").inner_text()
    assert "NCCL" in diagnosis
    _shot(page, "seen-en")


def test_graph_renders_pans_zooms_and_clicks_through(tab: Page, base_url: str) -> None:
    page = tab.page
    page.goto(f"{base_url}/ui/incidents/IL-0025?lang=en")
    nodes = page.locator("svg.graph .node")
    assert nodes.count() >= 6
    svg = page.locator("svg.graph")
    before = svg.get_attribute("viewBox")
    page.get_by_role("button", name="Zoom in").click()
    zoomed = svg.get_attribute("viewBox")
    assert zoomed != before
    box = svg.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 40, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + 140, box["y"] + 90, steps=5)
    page.mouse.up()
    assert svg.get_attribute("viewBox") != zoomed  # panned
    page.get_by_role("button", name="Reset view").click()
    assert svg.get_attribute("viewBox") == before
    _shot(page, "incident-graph-en")
    target = page.locator("svg.graph .node.incident:not(.center)").first
    href = target.get_attribute("href")
    assert href
    target.dispatch_event("click")
    page.wait_for_url(f"**{href.split('?')[0]}**")


def test_language_switch_keeps_the_page(tab: Page, base_url: str) -> None:
    page = tab.page
    page.goto(f"{base_url}/ui/topics/nccl?lang=en")
    assert page.locator("html").get_attribute("lang") == "en"
    page.get_by_role("link", name="Switch language").click()
    page.wait_for_url("**/ui/topics/nccl?lang=ko")
    assert page.locator("html").get_attribute("lang") == "ko"
    assert "연대표" in page.locator("main").inner_text()
    _shot(page, "topic-ko")


PAGES = ["/", "/?q=Xid+79", "/ui/seen", "/ui/incidents/IL-0025", "/ui/topics", "/ui/topics/infiniband", "/ui/clusters", "/ui/review"]


@pytest.mark.parametrize("path", PAGES)
def test_page_basics_on_a_phone(browser: Any, base_url: str, path: str) -> None:
    phone = Page(browser, width=PHONE_WIDTH, height=844)
    try:
        phone.page.goto(f"{base_url}{path}", wait_until="networkidle")
        assert phone.page.title().strip()
        unlabelled = phone.page.evaluate("""() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
            .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
            .map(el => el.outerHTML)""")
        assert unlabelled == []
        overflow = phone.page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {PHONE_WIDTH}px"
        assert phone.errors == []
    finally:
        phone.close()


def test_first_load_is_small_and_both_themes_render(browser: Any, base_url: str) -> None:
    for scheme in ("light", "dark"):
        visit = Page(browser, scheme=scheme)
        try:
            visit.page.goto(f"{base_url}/?lang=en", wait_until="networkidle")
            assert visit.bytes < FIRST_LOAD_BUDGET, f"first load transferred {visit.bytes} bytes"
            background = visit.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
            assert (background == "rgb(255, 255, 255)") == (scheme == "light")
            _shot(visit.page, f"home-{scheme}")
            if SCREENSHOTS:
                for path, name in [("/ui/incidents/IL-0025?lang=ko", "incident"), ("/ui/clusters?lang=en", "clusters"),
                                   ("/ui/seen?lang=en&text=" + SEED_WATCHDOG.replace(" ", "+"), "seen"),
                                   ("/ui/topics/nccl?lang=en", "topic"), ("/ui/review?lang=en", "review")]:
                    visit.page.goto(f"{base_url}{path}", wait_until="networkidle")
                    _shot(visit.page, f"{name}-{scheme}")
            assert visit.errors == []
        finally:
            visit.close()
