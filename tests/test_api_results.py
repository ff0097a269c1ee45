"""What search, similar and RAG results say about the records they cite, through HTTP (TestClient), a real MCP client
session and the CLI, on a small library with the fake embedder and one English-only draft."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import seed_tagger, small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.models import Incident

# IL-0111: Akamai's DNS outage, whose DNS concept has aliases (Route 53, nameserver) the record never says
IDS = ["IL-0111", "IL-0025", "IL-0076", "IL-0133"]
DRAFT = {"org": "aws", "title": {"en": "Zebra-unicorn router meltdown in eu-west-9"},
         "summary": {"en": "Unreviewed claim that a zebra-unicorn router melted."},
         "body": {"en": "Nothing here has been reviewed."},
         "sources": [{"url": "https://example.com/unreviewed", "title": "blog"}]}
LOCAL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, hashed_tagger: Path) -> Library:
    root = tmp_path_factory.mktemp("results")
    lib = Library(load_library(small_library(root / "lib", data_dir, IDS)),
                  SearchConfig(cache_dir=seed_tagger(hashed_tagger, root / "cache")), embedder=HashEmbedder())
    lib.create_draft(DRAFT, actor="test")
    lib.refresh()
    lib.build_index()
    return lib


@pytest.fixture(scope="module")
def client(library: Library) -> Iterator[TestClient]:
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url=LOCAL) as test_client:
        yield test_client


def _draft_id(library: Library) -> str:
    [draft] = [i.id for i in library.incidents() if i.is_draft]
    return draft


def _own_text(incident: Incident) -> str:
    """Every text the record says, whitespace-normalised as passages are."""
    parts: list[str] = []
    for lang in ("en", "ko"):
        for text in (incident.title, incident.summary, incident.body, incident.detection, incident.mitigation,
                     *incident.lessons):
            parts.append((getattr(text, lang) or "") if text is not None else "")
    parts += [signal.text for signal in incident.signals]
    return " ".join(" ".join(parts).split())


def _words(text: str) -> list[str]:
    return re.findall(r"\w[\w'-]*", text)


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_rag_passages_are_the_incidents_own_text_never_its_vocabulary_names(client: TestClient, library: Library,
                                                                          lang: str) -> None:
    # the matched chunk of IL-0111 for these words is its list of concept names ("DNS, Domain Name System, …,
    # Route 53, …"): a RAG prompt must not be told the record says so
    query = "Route 53 nameserver DNS misconfiguration took down the whole service"
    assert any(r["why"]["chunk"]["kind"] == "concepts" for r in
               client.get("/search", params={"q": query, "k": 4, "lang": lang}).json()["results"])
    passages = client.get("/rag/context", params={"q": query, "k": 4, "lang": lang}).json()["passages"]
    assert {p["incident_id"] for p in passages} >= {"IL-0111"}
    for passage in passages:
        own = _own_text(library.get(passage["incident_id"]))
        # every sentence piece of the passage is in the record (chunks longer than the cap are split at sentence ends)
        assert " ".join(_words(passage["text"])) in " ".join(_words(own)), passage
        assert passage["kind"] in {"title", "body", "detail", "signal"}
        assert passage["chunk_id"].startswith(f"{passage['incident_id']}/{passage['kind']}/")
    assert "Route 53" not in " ".join(p["text"] for p in passages)


def test_rag_passage_lang_is_the_language_of_its_text(client: TestClient, library: Library) -> None:
    draft = _draft_id(library)
    # an English-only draft asked for in Korean: its English text, labelled en (it was labelled ko)
    [passage] = client.get("/rag/context", params={"q": "zebra-unicorn router meltdown", "k": 1, "lang": "ko"}).json()["passages"]
    assert passage["incident_id"] == draft
    assert passage["lang"] == "en" and "Zebra-unicorn" in passage["text"]
    # a Korean passage when the record has one
    korean = client.get("/rag/context", params={"q": "InfiniBand 패브릭", "k": 3, "lang": "ko"}).json()["passages"]
    hangul = re.compile("[\uac00-\ud7a3]")
    assert korean and all(bool(hangul.search(p["text"])) == (p["lang"] == "ko") for p in korean)
    assert all(p["lang"] in {"en", "ko", "raw"} for p in korean)
    # a log line quoted verbatim is raw, whatever language was asked for
    [signal] = library.get("IL-0025").signals[:1]
    for lang in ("en", "ko"):
        passages = client.get("/rag/context", params={"q": signal.text, "k": 1, "lang": lang}).json()["passages"]
        assert passages[0]["kind"] == "signal" and passages[0]["lang"] == "raw"
        assert passages[0]["text"] == " ".join(signal.text.split())


def test_results_name_the_review_status_and_drafts_can_be_left_out(client: TestClient, library: Library) -> None:
    draft = _draft_id(library)
    query = {"q": "zebra-unicorn router meltdown", "k": 5}
    found = client.get("/search", params=query).json()["results"]
    assert found[0]["id"] == draft and found[0]["status"] == "draft"
    assert all(r["status"] == "published" for r in found[1:])
    [passage] = client.get("/rag/context", params={**query, "k": 1}).json()["passages"]
    assert passage["incident_id"] == draft and passage["status"] == "draft"
    similar = client.post("/similar", json={"text": "zebra-unicorn router meltdown", "k": 5}).json()["results"]
    assert {r["id"]: r["status"] for r in similar}[draft] == "draft"
    # the filter is one of the request rules: every route with filters has it
    published = {"status": "published"}
    assert draft not in {r["id"] for r in client.get("/search", params={**query, **published}).json()["results"]}
    assert draft not in {p["incident_id"] for p in
                         client.get("/rag/context", params={**query, **published}).json()["passages"]}
    assert draft not in {r["id"] for r in client.post("/similar", json={"text": "zebra-unicorn router meltdown",
                                                                       "filters": published}).json()["results"]}
    assert [i["id"] for i in client.get("/incidents", params={"status": "draft"}).json()["items"]] == [draft]
    bad = client.get("/search", params={**query, "status": "reviewed"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "status"]


def test_mcp_and_cli_results_name_drafts_and_filter_them(library: Library, tmp_path: Path) -> None:
    import json

    import anyio
    from mcp import Client
    from typer.testing import CliRunner

    from incidentlib.cli import app as cli_app
    from incidentlib.mcp_server import build_mcp_server

    draft = _draft_id(library)
    calls: dict[str, object] = {}

    async def session() -> None:
        async with Client(build_mcp_server(library)) as mcp:
            calls["all"] = await mcp.call_tool("search_incidents", {"query": "zebra-unicorn router meltdown", "k": 3})
            calls["published"] = await mcp.call_tool("search_incidents", {"query": "zebra-unicorn router meltdown",
                                                                          "k": 3, "status": "published"})
            calls["similar"] = await mcp.call_tool("similar_incidents", {"text": "zebra-unicorn router meltdown",
                                                                         "k": 3, "status": "published"})
            calls["detail"] = await mcp.call_tool("get_incident", {"incident_id": draft})

    anyio.run(session)
    found = calls["all"]
    first = found.structured_content["results"][0]  # type: ignore[attr-defined]
    assert (first["id"], first["status"]) == (draft, "draft")
    assert f"{draft} — Zebra-unicorn router meltdown in eu-west-9 [draft]" in found.content[0].text  # type: ignore[attr-defined]
    for name in ("published", "similar"):
        result = calls[name]
        assert not result.is_error, result  # type: ignore[attr-defined]
        results = result.structured_content["results"]  # type: ignore[attr-defined]
        assert results and all(r["status"] == "published" and r["id"] != draft for r in results)
    assert "[draft]" in calls["detail"].content[0].text.splitlines()[0]  # type: ignore[attr-defined]

    runner = CliRunner()
    base = ["search", "zebra-unicorn router meltdown", "--data", str(library.root), "--mode", "lexical",
            "--cache", str(tmp_path / "cache"), "-k", "3"]
    shown = runner.invoke(cli_app, base)
    assert shown.exit_code == 0, shown.output
    assert f"{draft} Zebra-unicorn router meltdown in eu-west-9 [draft]" in shown.output
    filtered = runner.invoke(cli_app, [*base, "--status", "published", "--json"])
    assert filtered.exit_code == 0, filtered.output
    results = json.loads(filtered.output)["results"]
    assert results and all(r["status"] == "published" and r["id"] != draft for r in results)


def test_mcp_tools_refuse_unknown_arguments_naming_them(library: Library) -> None:
    import anyio
    from mcp import Client

    from incidentlib.mcp_server import build_mcp_server

    calls: dict[str, object] = {}

    async def session() -> None:
        async with Client(build_mcp_server(library)) as mcp:
            calls["tools"] = (await mcp.list_tools()).tools
            calls["nested"] = await mcp.call_tool("search_incidents", {"query": "DNS", "filters": {"org": "akamai"}})
            calls["misspelt"] = await mcp.call_tool("search_incidents", {"query": "DNS", "orgg": "akamai", "k": 3})
            calls["two"] = await mcp.call_tool("get_incident", {"incident_id": "IL-0111", "language": "ko", "x": 1})
            calls["range"] = await mcp.call_tool("search_incidents", {"query": "DNS", "k": 999})
            calls["good"] = await mcp.call_tool("search_incidents", {"query": "DNS", "org": "akamai", "k": 3})

    anyio.run(session)
    for tool in calls["tools"]:  # type: ignore[attr-defined]
        assert tool.input_schema.get("additionalProperties") is False, tool.name
    nested = calls["nested"]
    assert nested.is_error and "unknown argument 'filters'" in nested.content[0].text  # type: ignore[attr-defined]
    assert "org, component" in nested.content[0].text  # type: ignore[attr-defined]  # what it takes instead
    misspelt = calls["misspelt"]
    assert misspelt.is_error and "'orgg' (did you mean 'org'?)" in misspelt.content[0].text  # type: ignore[attr-defined]
    two = calls["two"]
    assert two.is_error and "unknown arguments 'language' (did you mean 'lang'?), 'x'" in two.content[0].text  # type: ignore[attr-defined]
    out_of_range = calls["range"]
    assert out_of_range.is_error  # type: ignore[attr-defined]
    text = out_of_range.content[0].text  # type: ignore[attr-defined]
    assert "k: Input should be less than or equal to 50" in text and "pydantic.dev" not in text and "999" not in text
    good = calls["good"]
    assert not good.is_error  # type: ignore[attr-defined]
    assert {r["org"] for r in good.structured_content["results"]} == {"akamai"}  # type: ignore[attr-defined]
