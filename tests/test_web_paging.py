"""Long lists of the web pages come in pages: the review queue with many drafts, signed in and out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.loader import load_library
from incidentlib.web._paging import Pager, page_number
from incidentlib.web._review import REVIEW_PAGE_SIZE

BASE_URL = "http://127.0.0.1:8000"
# More drafts than two pages hold, so that a middle page has both a previous and a next page.
DRAFTS = 2 * REVIEW_PAGE_SIZE + 3


def draft(n: int) -> dict[str, object]:
    return {"org": "meta", "title": {"en": f"Queued draft number {n:03d}"}, "summary": {"en": "A draft."},
            "body": {"en": "Body."}, "sources": [{"url": f"https://example.com/{n}", "title": "Postmortem"}],
            "inferred": [{"concept": "hbm", "kind": "component", "evidence": "memory", "method": "alias",
                          "confidence": 0.9}]}


@pytest.fixture()
def lib(tmp_path: Path, data_dir: Path) -> Library:
    library = Library(load_library(small_library(tmp_path / "lib", data_dir, ["IL-0001", "IL-0025"])), embedder=HashEmbedder())
    for n in range(DRAFTS):
        library.create_draft(draft(n), actor="importer")
    return library


@pytest.fixture()
def client(lib: Library) -> TestClient:
    return TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL, follow_redirects=False)


def sign_in(client: TestClient, lib: Library) -> str:
    token = lib.create_token("ann", "editor").token
    assert client.post("/ui/review/sign-in", data={"token": token, "lang": "en"}).status_code == 303
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', client.get("/ui/review?lang=en").text)
    assert found
    return found.group(1)


def drafts_on(page: str) -> list[str]:
    return re.findall(r'id="draft-([A-Z]+-\d+)"', page)


def test_page_numbers_and_pager() -> None:
    assert [page_number(v) for v in ("2", " 3 ", "0", "-1", "abc", "", None, "9" * 20)] == [2, 3, 1, 1, 1, 1, 1, 1]
    pager = Pager.of(9, 20, 43)
    assert (pager.page, pager.pages, pager.start, pager.end, pager.previous, pager.next) == (3, 3, 40, 43, 2, None)
    assert Pager.of(1, 20, 0).pages == 1 and Pager.of(1, 20, 0).next is None


def test_the_signed_in_queue_is_paged_with_the_total(client: TestClient, lib: Library) -> None:
    sign_in(client, lib)
    first = client.get("/ui/review", params={"lang": "en"}).text
    ids = [d.id for d in lib.drafts()]
    assert len(ids) == DRAFTS and drafts_on(first) == ids[:REVIEW_PAGE_SIZE]
    assert f"{DRAFTS} draft(s) waiting; 1–{REVIEW_PAGE_SIZE} on this page." in first
    assert 'rel="next" href="/ui/review?page=2&amp;lang=en"' in first and 'rel="prev"' not in first
    second = client.get("/ui/review", params={"lang": "ko", "page": "2"}).text
    assert drafts_on(second) == ids[REVIEW_PAGE_SIZE : 2 * REVIEW_PAGE_SIZE]
    assert 'rel="prev" href="/ui/review?lang=ko"' in second and 'rel="next" href="/ui/review?page=3&amp;lang=ko"' in second
    last = client.get("/ui/review", params={"lang": "en", "page": "99"}).text  # past the end: the last page
    assert drafts_on(last) == ids[2 * REVIEW_PAGE_SIZE :] and "page 3 of 3" in last


def test_the_signed_out_queue_is_paged_too(client: TestClient, lib: Library) -> None:
    page = client.get("/ui/review", params={"lang": "en", "page": "3"}).text
    listed = re.findall(r'<span class="id">([A-Z]+-\d+)</span> <bdi>Queued draft', page)
    assert listed == [d.id for d in lib.drafts()][2 * REVIEW_PAGE_SIZE :]
    assert f"{DRAFTS} draft(s) waiting; {2 * REVIEW_PAGE_SIZE + 1}–{DRAFTS} on this page." in page


def test_actions_return_to_the_page_they_were_sent_from(client: TestClient, lib: Library) -> None:
    csrf = sign_in(client, lib)
    second = client.get("/ui/review", params={"lang": "en", "page": "2"}).text
    assert second.count('name="page" value="2"') >= 3  # sign-out, each concept's two forms, publish, reject
    target = drafts_on(second)[0]
    accepted = client.post(f"/ui/review/{target}/concepts/hbm/accept", data={"csrf": csrf, "lang": "en", "page": "2"})
    assert accepted.status_code == 303
    assert accepted.headers["location"] == f"/ui/review?lang=en&done=accepted&id={target}&page=2#draft-{target}"
    rejected = client.post(f"/ui/review/{target}/reject", data={"csrf": csrf, "lang": "en", "page": "2",
                                                                "etag": lib.record(target).etag})
    assert rejected.headers["location"] == f"/ui/review?lang=en&done=rejected&id={target}&page=2"
    refused = client.post(f"/ui/review/{target}/publish", data={"csrf": csrf, "lang": "en", "page": "2"})
    assert refused.status_code == 404  # rejected already: said on the page the form came from
    assert "page 2 of 3" in refused.text and 'class="lang" href="/ui/review?page=2&amp;lang=ko"' in refused.text
