"""The language switch in a real headless Chromium against a real `incidentlib serve` process: it keeps a search
typed since the page loaded, and a paste not yet sent or too long for a link."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _server import running_server, wait_for_tagger
from test_web_browser import NAVIGATION_TIMEOUT_MS, Page, browser  # noqa: F401  (the module's Chromium fixture)

pytestmark = [pytest.mark.slow, pytest.mark.browser]
sync_api = pytest.importorskip("playwright.sync_api")

IDS = ["IL-0001", "IL-0002", "IL-0025"]
# Longer than a link may hold (MAX_QUERY_CHARS, 2,000): only a form can carry it to the other language.
LONG_PASTE = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=408951, OpType=_ALLGATHER_BASE)\n" * 30


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[str]:
    from conftest import small_library

    root = tmp_path_factory.mktemp("switch")
    with running_server("--data", str(small_library(root / "lib", data_dir, IDS)), "--cache", str(root / "cache"),
                        "--no-mcp") as url:
        yield url


def test_the_switch_follows_a_search_typed_as_you_go(browser: Any, base: str) -> None:  # noqa: F811
    tab = Page(browser)
    try:
        page = tab.page
        page.goto(f"{base}/?lang=en")
        page.get_by_label("Search incidents").press_sequentially("NCCL", delay=15)
        page.locator("#results .result").first.wait_for(timeout=60_000)
        assert "q=NCCL" in page.url and "org=" not in page.url and "severity=" not in page.url  # no empty filters
        switch = page.get_by_role("link", name="Switch language")
        assert "q=NCCL" in (switch.get_attribute("href") or "") and "lang=ko" in (switch.get_attribute("href") or "")
        switch.click()
        page.wait_for_url("**lang=ko**")
        assert page.locator("html").get_attribute("lang") == "ko"
        assert page.get_by_label("장애 사례 검색").input_value() == "NCCL"
        assert page.locator("#results .result").count() > 0
        assert tab.errors == []
    finally:
        tab.close()


def test_the_switch_keeps_a_paste_too_long_for_a_link(browser: Any, base: str) -> None:  # noqa: F811
    wait_for_tagger(base)
    tab = Page(browser)
    try:
        page = tab.page
        page.goto(f"{base}/ui/seen?lang=en")
        page.locator("#text").fill(LONG_PASTE)
        # the answer to a paste takes a navigation's time on a busy machine, not a click's
        page.get_by_role("link", name="Switch language").click(no_wait_after=True)
        page.locator("html[lang=ko]").wait_for(timeout=NAVIGATION_TIMEOUT_MS)
        assert page.locator("#text").input_value().strip() == LONG_PASTE.strip()
        assert tab.errors == []
    finally:
        tab.close()
