"""``inferred``: the component, cause and symptom filters widened to inferred links still proposed, so an imported
archive (drafts, no curated links) can be filtered before anyone reviews it; the same on every adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from incidentlib import Library
from incidentlib.cli import app
from incidentlib.errors import FilterError
from incidentlib.facets import Facets
from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.requests import IncidentFilter

ROWS = [
    ("DNS resolvers returned SERVFAIL for every domain after a configuration change pushed a bad zone file.",
     "Example DNS"),
    ("The NCCL watchdog timed out an all-reduce on rank 3 and the training job stopped.", "Example NCCL"),
    ("The database primary ran out of disk space and writes failed.", "Example Disk"),
]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """Three imported drafts, their concepts inferred on import, plus a copy of nothing curated."""
    folder = tmp_path_factory.mktemp("archive")
    source = folder / "tickets.jsonl"
    source.write_text("".join(json.dumps({"id": f"T-{n}", "org": "Example Corp", "title": title, "body": body,
                                          "source_url": f"https://tickets.example.com/{n}"}) + "\n"
                              for n, (body, title) in enumerate(ROWS, 1)), encoding="utf-8")
    report = run_import(source, folder / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="TK"))
    assert report.written and len(report.accepted) == 3, report.rejected
    return folder / "lib"


def test_concept_filters_match_inferred_links_only_when_asked(archive: Path) -> None:
    library = Library.open(archive)
    drafts = library.incidents()
    dns = next(i for i in drafts if "SERVFAIL" in i.body.get("en"))
    assert not dns.components and "dns" in {link.concept for link in dns.proposed("component")}
    assert library.filter_ids(IncidentFilter(component="dns")) == []  # curated links only: nothing is reviewed yet
    assert library.filter_ids(IncidentFilter(component="DNS", inferred=True)) == [dns.id]
    assert library.filter_ids(IncidentFilter(component="dns", inferred=False)) == []
    assert library.list_incidents(IncidentFilter(component="nccl", inferred=True)).total == 1
    # every incident passes `inferred` alone: it widens concept filters, it narrows nothing
    assert IncidentFilter(inferred=True).is_empty()
    assert library.list_incidents(IncidentFilter(inferred=True)).total == 3
    # a record's own check and the facet columns agree
    for filters in (IncidentFilter(component="dns", inferred=True), IncidentFilter(symptom="collective-timeout", inferred=True)):
        assert [i.id for i in drafts if library.matches(i, filters)] == library.filter_ids(filters)


def test_a_rejected_link_no_longer_matches(archive: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "lib"
    shutil.copytree(archive, copy)
    library = Library.open(copy)
    dns = next(i for i in library.incidents() if "SERVFAIL" in i.body.get("en"))
    causes = {link.concept for link in dns.proposed("cause")}
    assert causes and library.filter_ids(IncidentFilter(cause=sorted(causes)[0], inferred=True)) == [dns.id]
    assert library.filter_ids(IncidentFilter(component="dns", inferred=True)) == [dns.id]  # the columns are read now
    library.review_concept(dns.id, "dns", accept=False)
    # the same library after the write (its columns patched, not read again), then a fresh one
    assert library.filter_ids(IncidentFilter(component="dns", inferred=True)) == []
    assert library._facets == Facets.of(library.data.incidents)
    library.review_concept(dns.id, sorted(causes)[0], accept=True)  # accepted: a curated link, found without the flag
    assert library.filter_ids(IncidentFilter(cause=sorted(causes)[0])) == [dns.id]
    reopened = Library.open(copy)
    assert reopened.filter_ids(IncidentFilter(component="dns", inferred=True)) == []
    rows = Facets.of(reopened.data.incidents)
    assert "dns" not in rows.values["inferred:components"][rows.ids.index(dns.id)]


def test_the_filter_is_strict_and_offered_by_every_adapter(archive: Path) -> None:
    with pytest.raises(FilterError, match="inferred"):
        IncidentFilter.of(inferred="yes")
    result = CliRunner().invoke(app, ["list", "--data", str(archive), "--component", "dns", "--inferred", "--json"])
    assert result.exit_code == 0, result.output
    assert [item["title"] for item in json.loads(result.output)["items"]] == ["Example DNS"]
    plain = CliRunner().invoke(app, ["list", "--data", str(archive), "--component", "dns", "--json"])
    assert plain.exit_code == 0 and json.loads(plain.output)["items"] == []


def test_the_cli_says_when_only_inferred_links_match(archive: Path) -> None:
    result = CliRunner().invoke(app, ["list", "--data", str(archive), "--component", "dns"])
    assert result.exit_code == 0, result.output
    assert "0 incident(s)" in result.output
    assert "1 incident(s) match through concepts inferred from their text" in result.output and "--inferred" in result.output
    widened = CliRunner().invoke(app, ["list", "--data", str(archive), "--component", "dns", "--inferred"])
    assert "Example DNS [draft]" in widened.output and "not yet reviewed" not in widened.output
    nothing = CliRunner().invoke(app, ["list", "--data", str(archive), "--component", "infiniband"])
    assert nothing.exit_code == 0 and "not yet reviewed" not in nothing.output  # no incident has it, inferred or not
    words = ["search", "SERVFAIL", "--data", str(archive), "--mode", "lexical", "--component", "dns"]
    searched = CliRunner().invoke(app, words)
    assert searched.exit_code == 0 and "1 incident(s) match through concepts inferred" in searched.output
    # a filter that matches curated links, with a query whose words nothing holds: the hint would be wrong
    curated = CliRunner().invoke(app, ["search", "qqqzzzxx", "--mode", "lexical", "--component", "gpu"])
    assert curated.exit_code == 0 and "no results" in curated.output and "not yet reviewed" not in curated.output


def test_a_title_in_brackets_is_listed_as_written(tmp_path: Path) -> None:
    source = tmp_path / "tickets.jsonl"
    source.write_text(json.dumps({"id": "T-1", "org": "Example Corp", "title": "Queue [/x] stalled [bold]",
                                  "body": "The queue stalled for an hour.", "source_url": "https://t.example.com/1"}) + "\n",
                      encoding="utf-8")
    assert run_import(source, tmp_path / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="TK")).written
    result = CliRunner().invoke(app, ["list", "--data", str(tmp_path / "lib")])
    assert result.exit_code == 0, result.output  # "[/x]" was read as console markup: an error
    assert "Queue [/x] stalled [bold] [draft]" in " ".join(result.output.split())


def test_http_and_mcp_take_the_filter(archive: Path) -> None:
    import anyio
    from fastapi.testclient import TestClient
    from mcp import Client

    from incidentlib.api import ServiceSettings, create_app
    from incidentlib.mcp_server import build_mcp_server

    library = Library.open(archive)
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as client:
        plain = client.get("/incidents", params={"component": "dns"})
        widened = client.get("/incidents", params={"component": "dns", "inferred": "true"})
        bad = client.get("/incidents", params={"component": "dns", "inferred": "maybe"})
    assert plain.status_code == 200 and plain.json()["total"] == 0
    assert widened.status_code == 200 and [i["title"] for i in widened.json()["items"]] == ["Example DNS"]
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "inferred"]
    calls: dict[str, object] = {}

    async def session() -> None:
        async with Client(build_mcp_server(library)) as mcp:
            calls["plain"] = await mcp.call_tool("list_incidents", {"component": "dns"})
            calls["widened"] = await mcp.call_tool("list_incidents", {"component": "dns", "inferred": True})

    anyio.run(session)
    assert calls["plain"].structured_content["total"] == 0  # type: ignore[attr-defined]
    widened_items = calls["widened"].structured_content["items"]  # type: ignore[attr-defined]
    assert [i["title"] for i in widened_items] == ["Example DNS"]


def test_the_search_page_has_the_filter_and_keeps_it(archive: Path) -> None:
    import re

    from fakes import HashEmbedder
    from fastapi.testclient import TestClient

    from incidentlib.api import ServiceSettings, create_app
    from incidentlib.loader import load_library

    library = Library(load_library(archive), embedder=HashEmbedder())
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as client:
        plain = client.get("/", params={"component": "dns"})
        widened = client.get("/", params={"component": "dns", "inferred": "1"})
        fragment = client.get("/ui/results", params={"component": "dns", "inferred": "1"})
        unticked = [client.get("/", params={"component": "dns", "inferred": value}) for value in ("false", "0", "off", "no", "")]
        ticked = client.get("/", params={"component": "dns", "inferred": "True"})
        yes = client.get("/", params={"component": "dns", "inferred": "yes"})  # as the HTTP API reads it
        bad = client.get("/", params={"component": "dns", "inferred": "maybe"})
    listed = re.compile(r'<li class="result">\s*<h3><a href="/ui/incidents/([A-Z]+-\d+)')
    assert plain.status_code == 200 and listed.findall(plain.text) == []
    assert 'name="inferred"' in plain.text and "checked" not in plain.text.split('name="inferred"')[1].split(">")[0]
    dns = [i.id for i in library.incidents() if "SERVFAIL" in i.body.get("en")]
    assert widened.status_code == 200 and listed.findall(widened.text) == dns
    assert "checked" in widened.text.split('name="inferred"')[1].split(">")[0]  # the box stays ticked
    assert fragment.status_code == 200 and listed.findall(fragment.text) == dns
    for page in unticked:
        assert page.status_code == 200 and listed.findall(page.text) == []
        assert "checked" not in page.text.split('name="inferred"')[1].split(">")[0]
    assert listed.findall(ticked.text) == dns == listed.findall(yes.text)
    assert bad.status_code == 400 and "inferred" in bad.text and "maybe" in bad.text
