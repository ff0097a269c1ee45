"""Text from the records on the web pages: right-to-left control characters in a title cannot reorder the text
beside it (titles are isolated), drafts are marked as drafts, organizations are named in the page's language."""

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

BASE_URL = "http://127.0.0.1:8000"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: without isolation it reverses the org and date printed after the title
TITLE = f"{RLO}RTL override gnirts desrever"
DRAFT = {"org": "meta", "title": {"en": TITLE}, "summary": {"en": "NCCL watchdog timeout on the pangolin tier."},
         "body": {"en": "NCCL watchdog timeout; the pangolin tier stalled."}, "components": ["nccl"],
         "sources": [{"url": "https://example.com/rtl", "title": "Postmortem"}]}


@pytest.fixture()
def lib(tmp_path: Path, data_dir: Path) -> Library:
    library = Library(load_library(small_library(tmp_path / "lib", data_dir, ["IL-0001", "IL-0025"])), embedder=HashEmbedder())
    library.create_draft(DRAFT, actor="importer")
    return library


@pytest.fixture()
def client(lib: Library) -> TestClient:
    return TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL)


def test_a_right_to_left_override_in_a_title_is_isolated_wherever_it_is_listed(client: TestClient) -> None:
    pages = {"review": client.get("/ui/review?lang=en").text,
             "search": client.get("/", params={"q": "pangolin", "lang": "en"}).text,
             "topic": client.get("/ui/topics/meta?lang=en").text}  # with a draft of no date: it was a 500
    for name, page in pages.items():
        assert TITLE in page, name
        assert f"<bdi>{TITLE}</bdi>" in page, name  # the override ends with the title
        assert not re.search(f"[^>]{RLO}", page.replace(f"<bdi>{TITLE}", "")), name  # nowhere outside an isolate


def test_drafts_are_marked_and_organizations_named_in_lists(client: TestClient, lib: Library) -> None:
    draft_id = lib.drafts()[0].id
    org_ko = lib.vocab.get("meta").label.get("ko")
    mark = '<span class="tag status">초안</span>'
    search = client.get("/", params={"q": "pangolin", "lang": "ko"}).text
    item = search[search.index(f'href="/ui/incidents/{draft_id}'):]
    item = item[: item.index("</li>")]
    assert mark in item and f'<p class="meta">{org_ko}' in item  # the draft is marked; the org has its Korean name
    published = search[search.index('href="/ui/incidents/IL-'):]
    assert all(mark not in chunk for chunk in search.split("</li>") if draft_id not in chunk)
    assert published
    topic = client.get("/ui/topics/nccl", params={"lang": "en"}).text
    row = topic[topic.index(f'href="/ui/incidents/{draft_id}'):]
    assert '<span class="tag status">draft</span>' in row[: row.index("</li>")]
    related = client.get("/ui/incidents/IL-0025", params={"lang": "ko"}).text
    section = related[related.index('class="related"'):]
    section = section[: section.index("</ol>")]
    assert draft_id in section and mark in section  # the draft shares NCCL with IL-0025
    assert re.search(r'<span class="meta">[^<a-z]*[가-힣]', section)  # organizations by their Korean names


def test_an_organization_topic_is_labelled_in_the_page_language(client: TestClient) -> None:
    page = client.get("/ui/topics/meta", params={"lang": "ko"}).text
    assert '<p class="meta">조직</p>' in page and ">organization<" not in page
