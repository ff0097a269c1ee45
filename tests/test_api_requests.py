"""How the HTTP API reads and refuses requests: where a 422 says the problem is, strict JSON bodies, range checks,
status codes that agree with the schema, and caching headers; TestClient on a small library with the fake embedder."""

from __future__ import annotations

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

IDS = ["IL-0025", "IL-0111", "IL-0076"]
LOCAL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, data_dir: Path, hashed_tagger: Path) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("requests")
    library = Library(load_library(small_library(root / "lib", data_dir, IDS)),
                      SearchConfig(cache_dir=seed_tagger(hashed_tagger, root / "cache")), embedder=HashEmbedder())
    library.build_index()
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False)), base_url=LOCAL) as test_client:
        yield test_client


def _locs(response) -> list[list[str | int]]:  # type: ignore[no-untyped-def]
    assert response.status_code == 422, response.text
    return [error["loc"] for error in response.json()["detail"]]


def test_422s_say_where_the_request_carried_the_bad_value(client: TestClient) -> None:
    similar = "/similar"
    assert _locs(client.post(similar, json={"text": "NCCL timeout", "filters": {"cause": "nope"}})) == \
        [["body", "filters", "cause"]]
    assert _locs(client.post(similar, json={"text": "x", "filters": {"org": "acmee"}})) == [["body", "filters", "org"]]
    neither = client.post(similar, json={})  # a validator's message, without pydantic's "Value error, " before it
    assert neither.status_code == 422 and not neither.json()["detail"][0]["msg"].startswith("Value error")
    no_id = client.post(similar, json={"incident_id": " "})
    assert _locs(no_id) == [["body", "incident_id"]] and no_id.json()["detail"][0]["msg"] == "incident_id is empty"
    blank = client.post(similar, json={"text": "   "})
    assert _locs(blank) == [["body", "text"]] and blank.json()["detail"][0]["msg"] == "text is empty"
    assert _locs(client.post("/alerts/alertmanager", json={})) == [["body"]]
    assert _locs(client.post("/alerts/alertmanager", json={"version": "4", "alerts": [{"labels": {}}, 7]})) == \
        [["body", "alerts", 1]]
    assert _locs(client.post("/diagnose", json={"symptoms": ["collective-timeout", "nope"]})) == \
        [["body", "symptoms", 1]]
    empty = client.get("/search", params={"q": "   "})
    assert _locs(empty) == [["query", "q"]] and empty.json()["detail"][0]["msg"] == "query is empty"
    assert _locs(client.get("/rag/context", params={"q": " "})) == [["query", "q"]]
    refused = client.get("/search", params={"q": "!!!"})  # nothing to match: said, not ranked (the rest below, offline)
    assert refused.status_code == 422 and refused.json()["detail"][0]["msg"] == "query holds no letter or digit to search for"
    # a query-string filter stays a query parameter
    assert _locs(client.get("/search", params={"q": "dns", "cause": "nope"})) == [["query", "cause"]]


def test_json_bodies_are_strict_about_types_the_query_string_cannot_carry(client: TestClient) -> None:
    for k in (True, "7", 7.0):
        assert _locs(client.post("/similar", json={"text": "disk full", "k": k})) == [["body", "k"]]
    assert _locs(client.post("/similar", json={"text": "disk full", "filters": {"year_from": "2020"}})) == \
        [["body", "filters", "year_from"]]
    assert _locs(client.post("/diagnose", json={"text": "MFU drops", "limit": "3"})) == [["body", "limit"]]
    assert _locs(client.post("/diagnose/series", json={"text": "seconds,mfu\n0,1\n", "limit": True})) == [["body", "limit"]]
    assert len(client.post("/similar", json={"text": "disk full", "k": 2, "filters": {"severity": "sev1"}}).json()["results"]) <= 2
    # the query string is text: k=7 is converted there, and a boolean is still refused
    assert client.get("/search", params={"q": "disk", "k": "7"}).status_code == 200
    assert _locs(client.get("/search", params={"q": "disk", "k": "true"})) == [["query", "k"]]


def test_years_given_backwards_are_refused_naming_both(client: TestClient) -> None:
    backwards = client.get("/search", params={"q": "dns", "year_from": 2025, "year_to": 2024})
    assert _locs(backwards) == [["query", "year_from"], ["query", "year_to"]]
    message = "year_from 2025 is later than year_to 2024: no incident can match"
    assert [error["msg"] for error in backwards.json()["detail"]] == [message, message]
    assert _locs(client.get("/incidents", params={"year_from": 2025, "year_to": 2024})) == \
        [["query", "year_from"], ["query", "year_to"]]
    # a body says it the same way: one entry for each year, under the filters that hold them
    body = client.post("/similar", json={"text": "dns", "filters": {"year_from": 2025, "year_to": 2024}})
    assert _locs(body) == [["body", "filters", "year_from"], ["body", "filters", "year_to"]]
    assert [error["msg"] for error in body.json()["detail"]] == [message, message]
    assert client.get("/search", params={"q": "dns", "year_from": 2021, "year_to": 2021}).status_code == 200


def test_unknown_names_suggest_the_ids_they_begin(client: TestClient) -> None:
    # 'config' is too far from 'configuration-change' for a spelling match: the id's beginning is the hint
    hint = client.get("/search", params={"q": "dns", "cause": "config"}).json()["detail"][0]["msg"]
    assert "did you mean configuration-change" in hint
    component = client.get("/incidents", params={"component": "Infiniband fab"}).json()["detail"][0]["msg"]
    assert "did you mean infiniband-fabric" in component  # a label's beginning, any case, spaces as hyphens
    short = client.get("/incidents", params={"cause": "co"}).json()["detail"][0]["msg"]
    assert "configuration-change" not in short  # two letters begin too many names to be a hint


def _body_schema(schema: dict, path: str) -> dict:  # type: ignore[type-arg]
    """The JSON body schema of ``POST path``, with the document's components so that its $refs resolve."""
    body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return {**body, "components": schema["components"]}


def test_sparql_statuses_agree_by_get_and_post_and_with_the_schema(client: TestClient) -> None:
    long_query = "ASK { ?s ?p ?o }" + " " * 20_000
    by_get = client.get("/sparql", params={"query": long_query})
    by_form = client.post("/sparql", data={"query": long_query})
    by_body = client.post("/sparql", content=long_query, headers={"content-type": "application/sparql-query"})
    assert (_locs(by_get), _locs(by_form), _locs(by_body)) == ([["query", "query"]], [["body", "query"]], [["body"]])
    assert "the limit is 20,000" in by_form.json()["detail"][0]["msg"]
    # a request without a query is the SPARQL protocol's 400, and the schema says the parameter is required
    assert client.get("/sparql").status_code == 400
    schema = client.get("/openapi.json").json()
    [parameter] = schema["paths"]["/sparql"]["get"]["parameters"]
    assert parameter["name"] == "query" and parameter["required"] is True
    for method in ("get", "post"):
        assert "422" in schema["paths"]["/sparql"][method]["responses"]


def test_the_schema_states_what_a_body_needs(client: TestClient) -> None:
    import jsonschema

    from incidentlib.api.routes_signals import ALERT_EXAMPLE

    schema = client.get("/openapi.json").json()
    cases = {
        "/diagnose": ([{}, {"symptoms": []}, {"text": "  "}],
                      [{"text": "MFU drops to 70% every 15 seconds"}, {"symptoms": ["collective-timeout"]}]),
        "/diagnose/series": ([{}, {"points": [{"seconds": 0, "mfu": 0.5}], "text": "seconds,mfu\n0,0.5\n"}],
                             [{"text": "seconds,mfu\n0,0.9\n10,0.9\n"}, {"points": [{"seconds": 0, "mfu": 0.9}]}]),
        "/alerts/alertmanager": ([{}, {"labels": {}}, {"status": "firing"}, {"message": " "}],
                                 [ALERT_EXAMPLE, {"message": "Xid 79 on gpu-node-3"}, {"labels": {"alertname": "GPUDown"}}]),
    }
    for path, (refused, accepted) in cases.items():
        validator = jsonschema.Draft202012Validator(_body_schema(schema, path))
        for body in refused:
            assert not validator.is_valid(body), (path, body)
            assert client.post(path, json=body).status_code == 422, (path, body)
        for body in accepted:
            assert validator.is_valid(body), (path, body)
            assert client.post(path, json=body).status_code == 200, (path, body)


def test_answers_negotiated_by_accept_language_say_they_vary_with_it(client: TestClient) -> None:
    for path, params in (("/incidents/IL-0025", {}), ("/search", {"q": "NCCL"}), ("/incidents", {"limit": 2}),
                         ("/topics/nccl", {})):
        korean = client.get(path, params=params, headers={"Accept-Language": "ko"})
        assert korean.status_code == 200
        assert "accept-language" in korean.headers.get("vary", "").lower(), path
        # no header at all still varies: a client that sends one gets another language
        assert "accept-language" in client.get(path, params=params).headers.get("vary", "").lower(), path
        # the URL decides when lang= is given
        explicit = client.get(path, params={**params, "lang": "ko"}, headers={"Accept-Language": "en"})
        assert "accept-language" not in explicit.headers.get("vary", "").lower(), path
        assert explicit.json() == korean.json()
    assert "vary" not in client.get("/health").headers


def test_accept_language_is_read_by_its_quality_values() -> None:
    from incidentlib.api.deps import preferred_language

    assert preferred_language("en;q=0.1, ko;q=0.9") == "ko"  # the weight decides, not the order
    assert preferred_language("ko;q=0, en") == "en" and preferred_language("ko;q=0") == "en"  # q=0 refuses Korean
    assert preferred_language("ko-KR,ko;q=0.9,en;q=0.5") == "ko" and preferred_language("en-US, ko") == "en"  # ties: order
    assert preferred_language("fr, de;q=0.5") == "en" and preferred_language(None) == "en"
    assert preferred_language("ko;q=abc, en;q=0.2") == "en"  # an unreadable weight is no preference


def test_a_query_without_a_letter_or_digit_is_refused_by_name() -> None:
    from incidentlib.errors import QueryError
    from incidentlib.requests import check_query

    for noise in ("!!!", "\U0001f600", "\u200b", "\x00", "\ufffd\ufffd", " -- "):
        with pytest.raises(QueryError, match="query holds no letter or digit to search for"):
            check_query(noise)
    assert check_query(" 403 ") == "403" and check_query("타임아웃") == "타임아웃"  # digits and Hangul are something to search for


def test_a_query_parameter_the_route_does_not_take_is_refused_by_name(client: TestClient) -> None:
    misspelt = client.get("/incidents", params={"yaer_from": "2020", "limit": "2"})
    assert _locs(misspelt) == [["query", "yaer_from"]]
    message = misspelt.json()["detail"][0]["msg"]
    assert "'yaer_from'" in message and "year_from" in message.split("takes:")[1] and "2020" not in message
    # a parameter of another endpoint, on a POST whose body is right, and on a route whose filters come from a dependency
    assert _locs(client.post("/similar", params={"k": "3"}, json={"text": "NCCL timeout"})) == [["query", "k"]]
    assert _locs(client.get("/search", params={"q": "dns", "cause": "dns-failure", "limit": "3", "mode": "lexical"})) == \
        [["query", "limit"]]
    assert client.get("/health", params={"_": "1700000000"}).status_code == 200  # a probe's cache-buster is not a failure
    asked = {"query": "ASK { ?s ?p ?o }", "format": "json", "output": "json"}  # as SPARQLWrapper sends it
    assert client.get("/sparql", params=asked).json()["boolean"] is True
