"""Fast tests of the adapters, analysis pictures and embedder wrappers on a small library with the fake embedder.

The full suite runs the same paths on the bundled library with the real models (tests marked slow);
these keep every module exercised by ``pytest -m "not slow"`` (real FAISS, BM25, rdflib, HTTP app, MCP session).
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest
from conftest import seed_tagger, small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library

IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002", "IL-0076"]


@pytest.fixture(scope="module")
def fake_library(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, hashed_tagger: Path) -> Library:
    root = tmp_path_factory.mktemp("fast")
    small = small_library(root / "small", data_dir, IDS)
    library = Library(load_library(small), SearchConfig(cache_dir=seed_tagger(hashed_tagger, root / "cache")),
                      embedder=HashEmbedder())
    library.build_index()
    return library


@pytest.fixture(scope="module")
def client(fake_library: Library) -> Iterator[TestClient]:
    with TestClient(create_app(fake_library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as test_client:
        yield test_client


def test_http_routes_on_a_small_library(client: TestClient, fake_library: Library) -> None:
    health = client.get("/health").json()
    assert health.pop("graph_ready") in (True, False)  # built after start, in the background
    assert health.pop("tagger_ready") in (True, False)
    assert health == {"status": "ok", "incidents": len(IDS), "embedder": "fake-hash"}
    page = client.get("/incidents", params={"component": "nccl"}).json()
    assert page["items"] and {item["id"] for item in page["items"]} <= set(IDS)
    related = client.get("/incidents/IL-0025/related").json()
    assert [item["id"] for item in related["items"]] == [item.id for item in fake_library.related("IL-0025")]
    found = client.get("/search", params={"q": "NCCL watchdog timeout", "k": 3}).json()
    assert found["results"] and {r["id"] for r in found["results"]} <= set(IDS)
    similar = client.post("/similar", json={"incident_id": "IL-0025", "k": 3}).json()
    assert "IL-0025" not in {r["id"] for r in similar["results"]}
    hood = client.get("/graph/neighbors/IL-0025").json()
    assert any(node["id"] == "component:nccl" for node in hood["nodes"])
    rows = client.get("/sparql", params={"query": "SELECT ?id WHERE { ?i dcterms:identifier ?id }"}).json()
    assert {b["id"]["value"] for b in rows["results"]["bindings"]} == set(IDS)
    assert client.post("/diagnose", json={"text": "Watchdog caught collective operation timeout"}).status_code == 200
    missing = client.get("/incidents/IL-9999")
    assert missing.status_code == 404 and "IL-9999" in missing.text
    refused = client.get("/sparql", params={"query": "DELETE WHERE { ?s ?p ?o }"})
    assert refused.status_code >= 400


def test_web_pages_on_a_small_library(client: TestClient, fake_library: Library) -> None:
    page = client.get("/ui/incidents/IL-0025", params={"lang": "ko"})
    assert page.status_code == 200
    assert fake_library.get("IL-0025").title.get("ko") in page.text
    assert all(f"/ui/incidents/{item.id}" in page.text for item in fake_library.related("IL-0025", limit=3))
    results = client.get("/ui/results", params={"q": "NCCL watchdog"})
    assert results.status_code == 200 and "IL-" in results.text
    topic = client.get("/ui/topics/nccl")
    assert topic.status_code == 200 and "IL-0025" in topic.text
    assert client.get("/ui/incidents/IL-9999").status_code == 404


def test_maps_render_png_and_html(fake_library: Library) -> None:
    """The drawing code on a trivial layout; the t-SNE layout of the whole library is covered by the slow suite."""
    from incidentlib.analysis import maps

    ids = IDS[:3]
    points = maps.project(np.eye(3, dtype=np.float32))  # under 4 points: laid out on a line, no t-SNE
    assert points.shape == (3, 2) and len({tuple(p) for p in points}) == 3
    clusters = fake_library.clusters("graph")
    titles = {i: fake_library.get(i).title.get("ko") for i in ids}
    assert maps.map_png(ids, titles, points, clusters, "ko").startswith(b"\x89PNG\r\n\x1a\n")
    page = maps.map_html(ids, titles, points, clusters, "ko", "/incidents/{id}")
    assert '"link": "/incidents/{id}"' in page
    assert all(f'"id": "{i}", "title": {json.dumps(titles[i], ensure_ascii=False)}' in page for i in ids)
    assert fake_library.neighbourhood_png("IL-0025").startswith(b"\x89PNG")


def test_mcp_tools_in_memory(fake_library: Library) -> None:
    from mcp.client.client import Client

    from incidentlib.mcp_server import build_mcp_server

    results: dict[str, object] = {}

    async def session() -> None:
        async with Client(build_mcp_server(fake_library)) as client:
            results["names"] = {tool.name for tool in (await client.list_tools()).tools}
            results["related"] = await client.call_tool("related_incidents", {"incident_id": "IL-0025", "limit": 50})
            results["search"] = await client.call_tool("search_incidents", {"query": "NCCL timeout", "k": 3})
            results["error"] = await client.call_tool("get_incident", {"incident_id": "IL-9999"})

    anyio.run(session)
    assert {"search_incidents", "related_incidents", "get_incident", "similar_incidents"} <= results["names"]  # type: ignore[operator]
    related = results["related"]
    assert not related.is_error  # type: ignore[attr-defined]
    items = related.structured_content["items"]  # type: ignore[attr-defined]
    assert [item["id"] for item in items] == [item.id for item in fake_library.related("IL-0025", limit=50)]
    search = results["search"]
    assert not search.is_error and "IL-" in search.content[0].text  # type: ignore[attr-defined]
    error = results["error"]
    assert error.is_error and "IL-9999" in error.content[0].text  # type: ignore[attr-defined]


def test_mcp_endpoint_is_built_on_its_first_request(fake_library: Library) -> None:
    app = create_app(fake_library, ServiceSettings())
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"accept": "application/json, text/event-stream"}
    with TestClient(app, base_url="http://127.0.0.1:8000") as http:
        assert http.get("/health").status_code == 200
        assert not app.state.mcp.built  # creating the app and answering other routes did not build it
        first = http.post("/mcp", json=hello, headers=accept)
        assert first.status_code == 200 and "serverInfo" in first.text
        assert app.state.mcp.built
        # the SDK's own transport checks apply to the lazily built route too
        assert http.post("/mcp", json=hello, headers={**accept, "origin": "http://attacker.example"}).status_code == 403
        assert http.post("/mcp", json=hello, headers=accept).status_code == 200


class _CountingModel:
    """Stands in for the model inside a wrapper: records each batch, returns one word-hash vector per text."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bool | None]] = []
        self._hash = HashEmbedder(dim=8)

    def encode(self, texts: Sequence[str], is_query: bool | None = None) -> np.ndarray:
        self.batches.append((len(texts), is_query))
        return self._hash._vector(texts[0])[None, :].repeat(len(texts), axis=0) * 3.0


@pytest.mark.parametrize("module,cls,dim", [("e5", "E5SmallEmbedder", 384), ("use", "UseM3Embedder", 512)])
def test_builtin_wrappers_batch_and_normalise(module: str, cls: str, dim: int) -> None:
    """The wrapper logic (batches of ``batch_size``, unit length, empty input) without loading the model."""
    import importlib

    wrapper_cls = getattr(importlib.import_module(f"incidentlib.embeddings.{module}"), cls)
    wrapper = wrapper_cls.__new__(wrapper_cls)
    wrapper.batch_size = 2
    wrapper._model = model = _CountingModel()
    vectors = wrapper.encode_documents(["nccl timeout"] * 5)
    assert vectors.shape == (5, 8)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert [size for size, _ in model.batches] == [2, 2, 1]
    if module == "e5":  # e5 is asymmetric: documents and queries are encoded differently
        wrapper.encode_queries(["nccl"])
        assert [flag for _, flag in model.batches] == [False, False, False, True]
    assert wrapper.encode_documents([]).shape == (0, dim)


def test_python_dash_m_runs_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["incidentlib", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("incidentlib", run_name="__main__")
    assert done.value.code == 0
    assert "search" in capsys.readouterr().out


def test_watch_rate_limiter_answers_each_problem_once_per_window() -> None:
    """The log watcher's limiter on its own (the slow suite runs it over a real flood with the real index)."""
    from incidentlib.analysis.watch import RateLimiter

    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0], window_s=10.0, max_answers=2)
    assert limiter.allow("xid:79")
    assert not limiter.allow("xid:79")  # a repeat inside the window is counted, not answered
    assert limiter.allow("nccl-watchdog:allreduce")
    assert not limiter.allow("ecc:dbe")  # a third distinct problem in one window overflows
    assert limiter.suppressed == {"xid:79": 1, "overflow": 1}
    now[0] = 10.0
    assert limiter.allow("xid:79")  # the window has passed


def test_the_graph_process_builds_at_a_lower_priority() -> None:
    code = ("import os; from incidentlib.api.sparql_runner import GRAPH_BUILD_NICENESS, _lower_priority, _restore_priority\n"
            "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
            "assert _lower_priority(GRAPH_BUILD_NICENESS) == before\n"
            "print(before, os.getpriority(os.PRIO_PROCESS, 0))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    before, during = map(int, out.stdout.split())
    from incidentlib.api.sparql_runner import GRAPH_BUILD_NICENESS

    assert during == min(before + GRAPH_BUILD_NICENESS, 19)  # 19: the lowest priority there is


def test_pasted_text_before_the_background_tagger_is_ready_is_refused_at_once(
        tmp_path: Path, data_dir: Path, hashed_tagger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import incidentlib.library as library_module

    small = small_library(tmp_path / "small", data_dir, IDS)
    library = Library(load_library(small), SearchConfig(cache_dir=seed_tagger(hashed_tagger, tmp_path / "cache")),
                      embedder=HashEmbedder())
    library.build_index()
    monkeypatch.setattr(library_module, "TAGGER_WAIT_SECONDS", 0.05)
    library.expect_background_tagger()  # what serve's start does; the preparation itself has not run
    client = TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000")
    refused = client.post("/similar", json={"text": "NCCL watchdog timeout on rank 3", "k": 3})
    assert refused.status_code == 503 and refused.headers["Retry-After"] == str(library_module.TAGGER_RETRY_AFTER_SECONDS)
    assert "tagger" in refused.json()["detail"] and not library.tagger_ready
    assert client.get("/search", params={"q": "NCCL watchdog timeout", "k": 3}).status_code == 200  # searches go on
    assert client.post("/similar", json={"incident_id": "IL-0025", "k": 3}).status_code == 200  # no tagger needed
    page = client.get("/ui/seen", params={"text": "NCCL watchdog timeout on rank 3"})  # the page says the same
    assert page.status_code == 503 and page.headers["Retry-After"] == str(library_module.TAGGER_RETRY_AFTER_SECONDS)
    assert "text/html" in page.headers["content-type"] and "tagger" in page.text
    assert "NCCL watchdog timeout on rank 3</textarea>" in page.text  # the paste is kept, to send again
    library.prepare_tagger()
    answered = client.post("/similar", json={"text": "NCCL watchdog timeout on rank 3", "k": 3})
    assert answered.status_code == 200 and answered.json()["results"]


def test_diagnosis_of_text_the_library_cannot_read_has_no_evidence(fake_library: Library) -> None:
    for unreadable in ("asdf qwer zxcv", "zzqx 1234567 0xdeadbeef99 pid=42"):  # placeholders are no words either
        gibberish = fake_library.diagnose(text=unreadable)
        assert gibberish.confidence == "low" and gibberish.note.startswith("No evidence: no word of the text"), unreadable
    read = fake_library.diagnose(text="Watchdog caught collective operation timeout on NCCL")
    assert read.causes and not read.note.startswith("No evidence")
