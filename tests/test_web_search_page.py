"""The search page's list through the ASGI app on a small library with the fake embedder: pages of results, an
honest count, a query no incident contains, filters without a query, and a bad year."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.loader import load_library
from incidentlib.web._search import MAX_SEARCH_PAGES, RESULTS_PER_PAGE

BASE_URL = "http://127.0.0.1:8000"
# More incidents than two pages of results, so that a search has a second page and a filter listing may too.
SIZE = 3 * RESULTS_PER_PAGE


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Library:
    ids = sorted(p.stem for p in (data_dir / "incidents").glob("IL-*.yaml"))[:SIZE]
    return Library(load_library(small_library(tmp_path_factory.mktemp("search") / "lib", data_dir, ids)),
                   embedder=HashEmbedder())


@pytest.fixture(scope="module")
def client(lib: Library) -> TestClient:
    return TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL)


def listed(page: str) -> list[str]:
    return re.findall(r'<li class="result">\s*<h3><a href="/ui/incidents/([A-Z]+-\d+)', page)


def test_a_query_no_incident_contains_is_said_not_counted_as_results(client: TestClient) -> None:
    page = client.get("/", params={"q": "zzqxqvnonexistentword", "lang": "en"}).text
    assert "No incident contains the words of “zzqxqvnonexistentword”" in page
    assert "Results for" not in page
    ko = client.get("/ui/results", params={"q": "zzqxqvnonexistentword", "lang": "ko"}).text
    assert "낱말이 들어 있는 사례가 없습니다" in ko
    found = client.get("/", params={"q": "NCCL", "lang": "en"}).text
    assert "Results for <q>NCCL</q> — 1–" in found and "No incident contains" not in found


def test_search_results_come_in_pages_with_an_honest_count(client: TestClient) -> None:
    first = client.get("/", params={"q": "GPU training outage", "lang": "en"}).text
    assert f"— 1–{RESULTS_PER_PAGE} (more on the next page)" in first
    assert 'rel="next" href="/?q=GPU+training+outage&amp;page=2&amp;lang=en"' in first
    second = client.get("/ui/results", params={"q": "GPU training outage", "lang": "en", "page": "2"}).text
    assert f"— {RESULTS_PER_PAGE + 1}–" in second and 'rel="prev" href="/?q=GPU+training+outage&amp;lang=en"' in second
    assert len(listed(first)) == RESULTS_PER_PAGE and not set(listed(first)) & set(listed(second))
    beyond = client.get("/", params={"q": "GPU", "lang": "en", "page": str(MAX_SEARCH_PAGES + 5)})
    assert beyond.status_code == 200  # past what the library returns: its last page


def test_filters_without_a_query_list_the_incidents_they_match(client: TestClient, lib: Library) -> None:
    org, count = Counter(i.org for i in lib.incidents()).most_common(1)[0]
    page = client.get("/", params={"org": org, "lang": "en"}).text
    expected = [i.id for i in lib.list_incidents().items if i.org == org]
    assert listed(page) == expected[:RESULTS_PER_PAGE] and count >= 2
    assert f"{count} incident(s) match the filters; 1–{min(count, RESULTS_PER_PAGE)} on this page." in page
    assert "Type a symptom" not in page  # the start hint is for an empty search
    fragment = client.get("/ui/results", params={"org": org, "q": "", "lang": "ko"}).text
    assert listed(fragment) == expected[:RESULTS_PER_PAGE] and f"필터에 맞는 사례 {count}건" in fragment
    everything = client.get("/", params={"year": "1999", "lang": "en"}).text
    assert "No incident matches" in everything


def test_a_year_that_is_not_a_year_is_refused_like_other_bad_filters(client: TestClient) -> None:
    bad = client.get("/", params={"q": "GPU", "year": "abcd", "lang": "en"})
    assert bad.status_code == 400 and "year: &#39;abcd&#39; is not a year" in bad.text
    assert client.get("/ui/results", params={"q": "GPU", "year": "abcd"}).status_code == 400
    assert 'class="error-lead"' not in bad.text  # an English page: the message is in its language


def test_a_korean_page_says_in_korean_which_field_a_refusal_is_about(client: TestClient) -> None:
    """The library's messages are English: a Korean page names the field in Korean before the message, marked as
    English text."""
    bad = client.get("/", params={"q": "GPU", "year": "abcd", "lang": "ko"})
    assert bad.status_code == 400 and "요청을 처리할 수 없음" in bad.text
    assert "‘연도’ 값을 쓸 수 없습니다" in bad.text
    assert '<p class="error" role="alert" lang="en">year: &#39;abcd&#39; is not a year' in bad.text
    fragment = client.get("/ui/results", params={"q": "GPU", "org": "x" * 3, "lang": "ko"})
    assert fragment.status_code == 400 and "‘조직’ 값을 쓸 수 없습니다" in fragment.text and "lang=en" in fragment.text
    long = client.get("/", params={"q": "x" * 3000, "lang": "ko"})  # refused by the route's declaration (422)
    assert long.status_code == 422 and "‘검색어’ 값을 쓸 수 없습니다" in long.text
    missing = client.get("/ui/incidents/IL-9999", params={"lang": "ko"})
    assert missing.status_code == 404 and "찾는 것이 없습니다" in missing.text
    nowhere = client.get("/ui/no-such-page", params={"lang": "ko"})  # the page's own Korean words: no lead
    assert nowhere.status_code == 404 and "이 주소에는 페이지가 없습니다" in nowhere.text and "error-lead" not in nowhere.text


def switch_href(page: str) -> str:
    found = re.search(r'<a class="lang" href="([^"]*)"', page)
    assert found
    return found.group(1).replace("&amp;", "&")


def test_a_refused_form_switches_language_through_a_get_address(client: TestClient) -> None:
    refused = client.post("/ui/review/sign-in", data={"token": "il_bad_bad", "lang": "en"})
    assert refused.status_code == 401 and switch_href(refused.text) == "/ui/review?lang=ko"
    assert client.get(switch_href(refused.text)).status_code == 200


@pytest.mark.slow  # the first text similarity fits the concept tagger: seconds
def test_a_pasted_text_switches_language_through_a_get_address(client: TestClient) -> None:
    short = client.post("/ui/seen?lang=en", data={"text": "NCCL watchdog timeout"})
    assert short.status_code == 200 and switch_href(short.text) == "/ui/seen?text=NCCL+watchdog+timeout&lang=ko"
    assert client.get(switch_href(short.text)).status_code == 200
    long = client.post("/ui/seen?lang=en", data={"text": "NCCL watchdog timeout " * 200})
    assert switch_href(long.text) == "/ui/seen?lang=ko"  # too long for a link: app.js posts it again instead


@pytest.mark.parametrize("path", ["/ui/nonexistent", "/ui/incidents/", f"/ui/incidents/IL-{'9' * 40}",
                                  f"/?q={'x' * 2001}"])
def test_a_bad_page_address_gets_the_html_error_page(client: TestClient, path: str) -> None:
    response = client.get(path + ("&" if "?" in path else "?") + "lang=ko")
    assert response.status_code in (404, 422) and response.headers["content-type"].startswith("text/html")
    assert '<html lang="ko">' in response.text and "<title>" in response.text and 'class="lang"' in response.text
    assert ("이 주소에는 페이지가 없습니다" in response.text) == (response.status_code == 404)


def test_the_json_api_keeps_its_json_errors(client: TestClient) -> None:
    assert client.get("/incidents/IL-9999").headers["content-type"].startswith("application/json")
    assert client.get("/nonexistent").headers["content-type"].startswith("application/json")
    assert client.get("/search", params={"q": "x" * 2001}).json()["detail"]
    assert client.get("/ui/static/missing.js").status_code == 404


def test_the_api_link_works_offline(client: TestClient) -> None:
    page = client.get("/", params={"lang": "en"}).text
    link = re.search(r'<footer>.*?<a href="([^"]+)"', page, re.DOTALL)
    assert link and link.group(1) == "/docs"
    described = client.get(link.group(1))
    assert described.status_code == 200 and described.headers["content-type"].startswith("text/html")
    # every script, style and icon of the page comes from this server: nothing to fetch from the internet
    assets = re.findall(r'(?:src|href)="([^"]+)"', described.text)
    assert len(assets) >= 3 and all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    for asset in assets:
        fetched = client.get(asset)
        assert fetched.status_code == 200 and len(fetched.content) > 100, asset
    assert "url: '/openapi.json'" in described.text and "paths" in client.get("/openapi.json").json()
    assert client.get("/redoc").status_code == 404  # ReDoc fetches its logo from the internet: not offered
