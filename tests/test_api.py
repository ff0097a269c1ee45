"""Every HTTP endpoint through the ASGI test client, including the error cases."""

from __future__ import annotations

import io
import json
import time

import networkx as nx
import pytest
from fastapi.testclient import TestClient
from rdflib import Graph

from incidentlib.api import ServiceSettings, create_app
from incidentlib.requests import MAX_QUERY_CHARS, MAX_SIMILAR_TEXT_CHARS
from incidentlib.tagging.tagger import incident_text

LOCAL = "http://127.0.0.1:8000"  # the Host allow-list accepts loopback names, not TestClient's "testserver"


@pytest.fixture(scope="module")
def client(search_library):
    with TestClient(create_app(search_library, ServiceSettings(sparql_timeout=20)), base_url=LOCAL) as test_client:
        yield test_client


def test_health(client, search_library) -> None:
    body = client.get("/health").json()
    assert body.pop("graph_ready") in (True, False)  # the graph is built after start, in the background
    assert body.pop("tagger_ready") in (True, False)  # so is the tagger
    assert body == {"status": "ok", "incidents": len(search_library), "embedder": "use-m3"}
    # a graph request waits for that build; afterwards the service says the graph is ready
    assert client.post("/sparql", content='ASK { ?i dcterms:identifier "IL-0025" }',
                       headers={"content-type": "application/sparql-query"}).json()["boolean"] is True
    assert client.get("/incidents/IL-0025/related").status_code == 200
    deadline = time.monotonic() + 60  # the flag is set just after the build the request waited for
    while not client.get("/health").json()["graph_ready"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.get("/health").json()["graph_ready"] is True


def test_list_incidents_filters_and_paging(client, search_library) -> None:
    page = client.get("/incidents", params={"limit": 5}).json()
    assert page["total"] == len(search_library) and len(page["items"]) == 5
    assert {"id", "title", "org", "date", "severity", "tags", "components"} <= page["items"][0].keys()
    second = client.get("/incidents", params={"limit": 5, "offset": 5}).json()
    assert not {i["id"] for i in page["items"]} & {i["id"] for i in second["items"]}
    nccl = client.get("/incidents", params={"component": "nccl", "limit": 500}).json()
    assert {i["id"] for i in nccl["items"]} == {i.id for i in search_library.incidents() if "nccl" in i.components}
    years = client.get("/incidents", params={"year_from": 2024, "year_to": 2024, "limit": 500}).json()
    assert years["items"] and all(i["date"].startswith("2024") for i in years["items"])
    assert client.get("/incidents", params={"limit": 501}).status_code == 422
    bad = client.get("/incidents", params={"component": "infinibandd"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "component"] and "did you mean" in bad.json()["detail"][0]["msg"]
    assert client.get("/incidents", params={"severity": "sev9"}).status_code == 422


def test_incident_detail_language_selection(client) -> None:
    english = client.get("/incidents/IL-0025").json()
    assert english["lang"] == "en" and english["related"]
    korean = client.get("/incidents/IL-0025", headers={"Accept-Language": "ko-KR,ko;q=0.9,en;q=0.5"}).json()
    assert korean["lang"] == "ko" and korean["title"] != english["title"]
    explicit = client.get("/incidents/IL-0025", params={"lang": "en"}, headers={"Accept-Language": "ko"}).json()
    assert explicit["lang"] == "en"
    missing = client.get("/incidents/IL-9999")
    assert missing.status_code == 404 and missing.json()["id"] == "IL-9999"
    assert client.get("/incidents/IL-0025", params={"lang": "fr"}).status_code == 422


def test_related_endpoint(client) -> None:
    body = client.get("/incidents/IL-0025/related", params={"limit": 500, "lang": "ko"}).json()
    by_id = {item["id"]: item for item in body["items"]}
    assert {"IL-0126", "IL-0133", "IL-0134", "IL-0021"} <= by_id.keys()
    assert "InfiniBand 패브릭" in by_id["IL-0126"]["shared"]
    assert {"id", "title", "org", "date", "shared", "score"} <= by_id["IL-0126"].keys()
    assert client.get("/incidents/IL-9999/related").status_code == 404


def test_search_endpoint(client) -> None:
    body = client.get("/search", params={"q": "Cloudflare 정규표현식 CPU 100%", "k": 3}, headers={"Accept-Language": "ko"}).json()
    assert body["query"] == "Cloudflare 정규표현식 CPU 100%"
    assert body["results"][0]["id"] == "IL-0101"
    assert {"id", "score", "title", "org", "date", "snippet", "why"} <= body["results"][0].keys()
    for mode in ("lexical", "dense", "hybrid"):
        assert client.get("/search", params={"q": "DNS", "mode": mode}).status_code == 200
    filtered = client.get("/search", params={"q": "outage", "k": 5, "org": "aws"}).json()
    assert len(filtered["results"]) == 5 and {r["org"] for r in filtered["results"]} == {"aws"}
    assert client.get("/search", params={"q": "dns", "k": 101}).status_code == 422
    assert client.get("/search", params={"q": ""}).status_code == 422
    too_long = client.get("/search", params={"q": "x" * 2001})
    assert too_long.status_code == 422 and "2000" in json.dumps(too_long.json())
    assert client.get("/search", params={"q": "dns", "mode": "magic"}).status_code == 422


def test_similar_endpoint(client, search_library) -> None:
    by_id = client.post("/similar", json={"incident_id": "IL-0025", "k": 5}).json()
    assert len(by_id["results"]) == 5 and all(r["id"] != "IL-0025" for r in by_id["results"])
    by_text = client.post("/similar", json={"text": "Xid 79 GPU has fallen off the bus", "k": 5}).json()
    mentions = {i.id for i in search_library.incidents()
                if "Xid 79" in (i.body.en or "") + " ".join(s.text for s in i.signals) or "gpu-fell-off-bus" in i.symptoms}
    assert by_text["results"][0]["id"] in mentions
    assert "gpu-fell-off-bus" in {c["id"] for c in by_text["results"][0]["why"]["shared_concepts"]}
    assert client.post("/similar", json={"k": 5}).status_code == 422
    assert client.post("/similar", json={"incident_id": "IL-0025", "text": "x"}).status_code == 422
    assert client.post("/similar", json={"incident_id": "IL-9999"}).status_code == 404
    # a whole write-up is a query for similar (not for search): the longest limit is the similar text's own
    write_up = incident_text(search_library.get("IL-0025"))
    assert MAX_QUERY_CHARS < len(write_up) <= MAX_SIMILAR_TEXT_CHARS
    assert client.get("/search", params={"q": write_up}).status_code == 422
    like = client.post("/similar", json={"text": write_up, "k": 5})
    assert like.status_code == 200 and like.json()["results"][0]["id"] == "IL-0025"
    too_long = client.post("/similar", json={"text": "x" * (MAX_SIMILAR_TEXT_CHARS + 1)})
    assert too_long.status_code == 422 and str(MAX_SIMILAR_TEXT_CHARS) in too_long.text


def test_topics_vocab_organizations(client, search_library) -> None:
    topics = client.get("/topics").json()["items"]
    nccl = next(t for t in topics if t["id"] == "nccl")
    assert nccl["incidents"] == sum(1 for i in search_library.incidents() if "nccl" in i.components)
    page = client.get("/topics/nccl", params={"lang": "ko"}).json()
    assert page["label"] == "NCCL" and page["incidents"] and page["definition"]
    assert client.get("/topics/InfiniBand").json()["id"] == "infiniband-fabric"
    assert client.get("/topics/not-a-thing").status_code == 404
    vocab = client.get("/vocab").json()
    assert vocab["total"] == len(search_library.vocab)
    entry = next(c for c in vocab["concepts"] if c["id"] == "hbm")
    assert entry["labels"]["ko"] and entry["broader"] == "gpu" and entry["alt_labels"]["en"]
    only_causes = client.get("/vocab", params={"kind": "cause"}).json()
    assert {c["kind"] for c in only_causes["concepts"]} == {"cause"}
    orgs = client.get("/organizations").json()["items"]
    assert orgs[0]["incidents"] >= orgs[-1]["incidents"]
    cloudflare = client.get("/organizations/cloudflare").json()
    assert cloudflare["kind"] == "organization" and "IL-0101" in {i["id"] for i in cloudflare["incidents"]}
    assert client.get("/organizations/nccl").status_code == 404


def test_graph_endpoints(client) -> None:
    hood = client.get("/graph/neighbors/IL-0025", params={"depth": 1}).json()
    assert any(n["id"] == "component:nccl" for n in hood["nodes"])
    graph = nx.node_link_graph(hood, edges="links")
    assert graph.number_of_nodes() == len(hood["nodes"])
    assert client.get("/graph/neighbors/IL-0025", params={"depth": 4}).status_code == 422
    assert client.get("/graph/neighbors/nothing-here").status_code == 404
    route = client.get("/graph/path", params={"from": "IL-0025", "to": "IL-0101"}).json()
    assert route["nodes"][0]["id"] == "incident:IL-0025" and route["concepts"]
    assert client.get("/graph/path", params={"from": "IL-0025", "to": "IL-9999"}).status_code == 404


def test_sparql_protocol(client, search_library) -> None:
    query = "SELECT (COUNT(?i) AS ?n) WHERE { ?i a il:Incident }"
    direct = client.post("/sparql", content=query, headers={"Content-Type": "application/sparql-query"})
    assert direct.status_code == 200
    assert direct.headers["content-type"].startswith("application/sparql-results+json")
    assert int(direct.json()["results"]["bindings"][0]["n"]["value"]) == len(search_library)
    form = client.post("/sparql", data={"query": 'ASK { ?i dcterms:identifier "IL-0025" }'})
    assert form.json()["boolean"] is True
    got = client.get("/sparql", params={"query": "CONSTRUCT { ?c skos:prefLabel ?l } WHERE { ?c skos:prefLabel ?l } LIMIT 3"})
    assert got.headers["content-type"].startswith("text/turtle")
    assert len(Graph().parse(data=got.text, format="turtle")) == 3


def test_sparql_refuses_updates_and_bad_queries(client) -> None:
    update = client.post("/sparql", data={"query": "DELETE WHERE { ?s ?p ?o }"})
    assert update.status_code == 400 and "read-only" in update.json()["detail"]
    form_update = client.post("/sparql", data={"update": "INSERT DATA { <urn:a> <urn:b> <urn:c> }"})
    assert form_update.status_code == 400
    typed_update = client.post("/sparql", content="CLEAR ALL", headers={"Content-Type": "application/sparql-update"})
    assert typed_update.status_code == 400
    assert client.post("/sparql", data={"query": "SELEKT nothing"}).status_code == 400
    assert client.post("/sparql", content="x", headers={"Content-Type": "text/plain"}).status_code == 415
    assert client.get("/sparql").status_code == 400
    count = client.post("/sparql", content="SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }",
                        headers={"Content-Type": "application/sparql-query"}).json()
    assert int(count["results"]["bindings"][0]["n"]["value"]) > 0  # nothing was deleted


def test_sparql_time_limit(search_library) -> None:
    slow = """SELECT (COUNT(*) AS ?n) WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }"""
    with TestClient(create_app(search_library, ServiceSettings(sparql_timeout=0.5, mount_mcp=False)), base_url=LOCAL) as quick:
        response = quick.post("/sparql", content=slow, headers={"Content-Type": "application/sparql-query"})
    assert response.status_code == 503
    assert "time limit" in response.json()["detail"]


@pytest.mark.parametrize("fmt,check", [
    ("ttl", lambda text: len(Graph().parse(data=text, format="turtle")) > 1000),
    ("jsonld", lambda text: len(Graph().parse(data=text, format="json-ld")) > 1000),
    ("nt", lambda text: len(Graph().parse(data=text, format="nt")) > 1000),
    ("graphml", lambda text: nx.read_graphml(io.BytesIO(text.encode())).number_of_nodes() > 100),
    ("jsonl", lambda text: all(json.loads(line)["id"].startswith("IL-") for line in text.splitlines())),
])
def test_export_streams_every_format(client, fmt, check) -> None:
    response = client.get("/export", params={"format": fmt})
    assert response.status_code == 200
    assert "attachment" in response.headers["content-disposition"]
    assert check(response.text)


def test_export_rejects_unknown_format(client) -> None:
    assert client.get("/export", params={"format": "xlsx"}).status_code == 422


def test_rag_context(client) -> None:
    body = client.get("/rag/context", params={"q": "InfiniBand port flapping during burn-in", "k": 3}).json()
    assert body["passages"]
    first = body["passages"][0]
    assert {"text", "incident_id", "title", "source_urls", "lang", "score"} <= first.keys()
    assert first["source_urls"][0].startswith("http")
    assert client.get("/rag/context", params={"q": "dns", "k": 21}).status_code == 422


def test_openapi_lists_every_route_with_models(client) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    for route in ("/health", "/incidents", "/incidents/{incident_id}", "/incidents/{incident_id}/related", "/search",
                  "/similar", "/topics", "/topics/{concept_id}", "/vocab", "/organizations", "/organizations/{org_id}",
                  "/graph/neighbors/{node}", "/graph/path", "/sparql", "/export", "/rag/context"):
        assert route in paths, route
    assert "SearchResponse" in schema["components"]["schemas"]
    assert "IncidentDetail" in schema["components"]["schemas"]
