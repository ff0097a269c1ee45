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
from _server import running_server, wait_for_tagger

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
    assert all(label.startswith(("같은 원인 ", "공통 ")) for label in labels)  # the seed's form: causes, then components
    assert any("InfiniBand" in label or "NCCL" in label for label in labels)
    _shot(page, "incident-ko")


def test_pasting_the_watchdog_line_shows_imbue_and_nccl(tab: Page, base_url: str) -> None:
    wait_for_tagger(base_url)
    page = tab.page
    page.goto(f"{base_url}/ui/seen?lang=en")
    page.get_by_label("Paste an error, a log excerpt or a description").fill(SEED_WATCHDOG)
    # the first diagnosis of a fresh server process is slow on a busy machine: wait as long as for a navigation
    page.get_by_role("button", name="Find similar incidents").click(timeout=NAVIGATION_TIMEOUT_MS)
    page.wait_for_selector("#h-similar", timeout=NAVIGATION_TIMEOUT_MS)
    similar_ids = page.locator("#h-similar ~ ol a .id").all_inner_texts()
    assert "IL-0025" in similar_ids[:5]
    diagnosis = page.locator("section[aria-labelledby=h-causes]").inner_text()
    assert "NCCL" in diagnosis
    _shot(page, "seen-en")


def test_the_api_page_renders_with_no_request_off_the_server(tab: Page, base_url: str) -> None:
    page = tab.page
    elsewhere: list[str] = []

    def offline(route: Any) -> None:  # as on a machine without the internet: only the server answers
        if route.request.url.startswith(base_url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    page.goto(f"{base_url}/ui/incidents/IL-0025?lang=en")
    page.locator("footer a").click()
    page.wait_for_selector(".opblock-summary-path", timeout=NAVIGATION_TIMEOUT_MS)  # Swagger UI drew the operations
    paths = [p.get_attribute("data-path") for p in page.locator(".opblock-summary-path").all()]
    assert page.url == f"{base_url}/docs" and "/search" in paths and "/similar" in paths
    assert elsewhere == []


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


def test_series_page_plots_the_curve_and_names_the_shape(tab: Page, base_url: str, tmp_path: Path) -> None:
    from incidentlib.analysis.synthetic import generate

    series, _ = generate("gc-drift", 1002)
    run = tmp_path / "run.csv"
    run.write_text("seconds,mfu\n" + "\n".join(f"{p.seconds},{'' if p.value is None else p.value}" for p in series.points),
                   encoding="utf-8")
    page = tab.page
    page.goto(f"{base_url}/ui/series?lang=en")
    page.get_by_label("…or a file").set_input_files(str(run))
    page.get_by_role("button", name="Diagnose").click()
    page.wait_for_selector("svg.mfu-plot polyline.curve")
    assert len(page.locator("svg.mfu-plot polyline.curve").get_attribute("points") or "") > 100
    assert page.locator(".shape-label").inner_text().strip()
    assert "IL-0025" in page.locator("main").inner_text()
    _shot(page, "series-en")


def test_language_switch_keeps_the_page(tab: Page, base_url: str) -> None:
    page = tab.page
    page.goto(f"{base_url}/ui/topics/nccl?lang=en")
    assert page.locator("html").get_attribute("lang") == "en"
    page.get_by_role("link", name="Switch language").click()
    page.wait_for_url("**/ui/topics/nccl?lang=ko")
    assert page.locator("html").get_attribute("lang") == "ko"
    assert "연대표" in page.locator("main").inner_text()
    _shot(page, "topic-ko")


PAGES = ["/", "/?q=Xid+79", "/ui/seen", "/ui/series", "/ui/incidents/IL-0025", "/ui/topics", "/ui/topics/infiniband", "/ui/clusters", "/ui/review"]


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


# ---- the review queue, signed in with an editor token made by the CLI --------------------------------------------
REVIEW_IDS = ["IL-0001", "IL-0002", "IL-0025"]
REVIEW_DRAFT = {"org": "meta", "title": {"en": "Checkpoint writes stall on a storage tier"},
                "summary": {"en": "Training jobs stalled while writing checkpoints."},
                "body": {"en": "The storage tier stopped answering while ranks wrote checkpoints; HBM errors were logged."},
                "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}],
                "inferred": [{"concept": "hbm", "kind": "component", "evidence": "HBM errors", "method": "alias", "confidence": 0.9},
                             {"concept": "gpu", "kind": "component", "evidence": "ranks", "method": "alias", "confidence": 0.55}]}
# the curator's edit before review: the Korean text and the date the published rules need
REVIEW_EDIT = {"title": {"ko": "체크포인트 쓰기 지연"}, "summary": {"ko": "체크포인트를 쓰는 동안 학습 작업이 멈췄다."}, "date": "2024-05"}


def _sign_in(page: Any, base_url: str, token: str) -> None:
    page.goto(f"{base_url}/ui/review?lang=en")
    field = page.get_by_label("Editor token")
    assert field.get_attribute("type") == "password"
    field.focus()
    page.keyboard.type(token)
    page.keyboard.press("Enter")  # the keyboard alone signs in
    page.wait_for_selector(".done")
    assert page.locator(".done").inner_text().strip() == "Signed in."


def test_review_queue_sign_in_diff_accept_publish_sign_out(browser: Any, tab: Page, tmp_path: Path, data_dir: Path) -> None:
    import subprocess

    import httpx
    from _server import executable
    from conftest import small_library

    library = small_library(tmp_path / "lib", data_dir, REVIEW_IDS)
    made = subprocess.run([executable(), "token", "create", "--role", "editor", "--name", "web-reviewer", "--data", str(library)],
                          capture_output=True, text=True, check=True)
    token = made.stdout.strip()
    assert token.startswith("il_")
    with running_server("--data", str(library), "--cache", str(tmp_path / "cache"), "--no-mcp") as base:
        auth = {"Authorization": f"Bearer {token}"}
        created = httpx.post(f"{base}/incidents", json=REVIEW_DRAFT, headers=auth, timeout=60)
        assert created.status_code == 201, created.text
        draft_id = created.json()["id"]
        edited = httpx.patch(f"{base}/incidents/{draft_id}", json=REVIEW_EDIT,
                             headers={**auth, "If-Match": created.headers["etag"]}, timeout=60)
        assert edited.status_code == 200, edited.text

        phone = Page(browser, width=PHONE_WIDTH, height=844)
        try:  # the signed-in queue, with its diff tables, fits a phone
            _sign_in(phone.page, base, token)
            overflow = phone.page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"the signed-in review page scrolls sideways by {overflow}px at {PHONE_WIDTH}px"
            assert phone.page.title().strip() and phone.errors == []
        finally:
            phone.close()

        page = tab.page
        _sign_in(page, base, token)
        assert token not in page.content()
        draft = page.locator(f"#draft-{draft_id}")
        assert "web-reviewer" in page.locator(".reviewer").inner_text()
        rows = {row.locator("th").inner_text(): row.locator("td").nth(1).inner_text() for row in draft.locator(".diff tbody tr").all()}
        assert rows["title.ko"] == REVIEW_EDIT["title"]["ko"] and rows["date"] == "2024-05"
        assert "HBM errors" in draft.locator(".proposed").inner_text()
        _shot(page, "review-signed-in-light")
        page.emulate_media(color_scheme="dark")
        _shot(page, "review-signed-in-dark")
        page.emulate_media(color_scheme="light")

        page.get_by_role("button", name="Accept: HBM memory").click()
        page.wait_for_selector(".done")
        assert "Concept accepted on" in page.locator(".done").inner_text()
        page.get_by_role("button", name=f"Publish {draft_id}").click()
        page.wait_for_selector(".done")
        assert page.locator(".done").inner_text().startswith("Published")
        assert page.locator(f"#draft-{draft_id}").count() == 0

        page.goto(f"{base}/ui/incidents/{draft_id}?lang=en")
        assert page.locator("article.incident").get_attribute("data-status") == "published"
        assert page.locator(".tag.status").count() == 0
        assert "HBM memory" in page.locator("aside").inner_text()
        history = httpx.get(f"{base}/incidents/{draft_id}/history", timeout=60).json()["items"]
        assert [(e["action"], e["actor"]) for e in history] == [
            ("create", "web-reviewer"), ("update", "web-reviewer"), ("accept-concept", "web-reviewer"), ("publish", "web-reviewer")]

        page.goto(f"{base}/ui/review?lang=en")
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_selector(".done")
        assert page.locator(".done").inner_text().strip() == "Signed out."
        assert page.get_by_label("Editor token").count() == 1
        assert page.context.cookies() == []


def test_import_page_previews_an_uploaded_export_and_files_it_for_review(browser: Any, tab: Page, tmp_path: Path,
                                                                          data_dir: Path) -> None:
    import subprocess

    from _server import executable
    from conftest import small_library

    library = small_library(tmp_path / "lib", data_dir, REVIEW_IDS)
    made = subprocess.run([executable(), "token", "create", "--role", "editor", "--name", "web-importer", "--data", str(library)],
                          capture_output=True, text=True, check=True)
    token = made.stdout.strip()
    export = tmp_path / "tickets.csv"
    export.write_text("Key,Summary,Description,Created,Company,Link\n"
                      'OPS-87,NCCL all-reduce hung on one rack,"Watchdog caught collective operation timeout.\n'
                      'The leaf switch had flapped.",05/Mar/24 2:22 PM,meta,https://tickets.example/OPS-87\n', encoding="utf-8")
    with running_server("--data", str(library), "--cache", str(tmp_path / "cache"), "--no-mcp") as base:
        page = tab.page
        _sign_in(page, base, token)
        page.goto(f"{base}/ui/import?lang=en")
        page.get_by_label("File", exact=True).set_input_files(str(export))
        page.get_by_label("Id prefix").fill("OPS")
        page.get_by_label("Field mapping, one FIELD=SOURCE a line").fill("id=Key\ntitle=Summary\nbody=Description\norg=Company")
        page.get_by_role("button", name="Preview").click()
        page.wait_for_selector(".import-report")
        assert "1 record(s) would be added, 0 rejected." in page.locator(".done").inner_text()
        assert "tickets.csv:2" in page.locator(".import-accepted").inner_text()
        assert "The leaf switch had flapped." in page.locator("#import-content").input_value()
        _shot(page, "import-preview-light")
        page.get_by_role("button", name="Import as drafts").click()
        page.wait_for_selector(".import-report")
        assert "1 draft(s) added" in page.locator(".done").inner_text()
        page.get_by_role("link", name="Review them").click()
        page.wait_for_selector("#draft-OPS-0087")
        assert "NCCL all-reduce hung on one rack" in page.locator("#draft-OPS-0087").inner_text()

        phone = Page(browser, width=PHONE_WIDTH, height=844)
        try:  # the form fits a phone
            _sign_in(phone.page, base, token)
            phone.page.goto(f"{base}/ui/import?lang=ko")
            overflow = phone.page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"the import page scrolls sideways by {overflow}px at {PHONE_WIDTH}px"
            assert phone.errors == []
        finally:
            phone.close()
