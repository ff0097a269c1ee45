"""The HTTP write API in process (TestClient) and MCP's create_draft: auth, ETags, 422 fields, import, OpenAPI."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from conftest import small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient
from mcp import Client

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.loader import load_library
from incidentlib.mcp_server import build_mcp_server

# the Host allow-list accepts loopback names only
BASE_URL = "http://127.0.0.1:8000"

IDS = ["IL-0001", "IL-0002", "IL-0025", "IL-0070"]  # IL-0025: named by data/diagnosis/shapes.yaml
DRAFT = {"org": "meta", "title": {"en": "Quokka storage stall"}, "summary": {"en": "s"}, "body": {"en": "quokka"},
         "sources": [{"url": "https://example.com/x", "title": "x"}]}


@pytest.fixture()
def lib(tmp_path: Path, data_dir: Path) -> Library:
    return Library(load_library(small_library(tmp_path / "lib", data_dir, IDS)), embedder=HashEmbedder())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.slow
def test_roles_etags_and_named_fields(lib: Library) -> None:
    editor, reader, admin = (lib.create_token(r, r).token for r in ("editor", "reader", "admin"))
    client = TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL)
    no_token = client.post("/incidents", json=DRAFT)
    assert no_token.status_code == 401 and no_token.headers["www-authenticate"] == "Bearer"
    assert client.post("/incidents", json=DRAFT, headers=bearer(reader)).status_code == 403
    created = client.post("/incidents", json=DRAFT, headers=bearer(editor))
    assert created.status_code == 201 and created.headers["location"] == f"/incidents/{created.json()['id']}"
    new_id, tag = created.json()["id"], created.headers["etag"]
    assert client.get(f"/incidents/{new_id}/record").headers["etag"] == tag
    assert client.patch(f"/incidents/{new_id}", json={"severity": "sev2"}, headers=bearer(editor)).status_code == 428
    ok = client.patch(f"/incidents/{new_id}", json={"severity": "sev2"}, headers={**bearer(editor), "If-Match": tag})
    assert ok.status_code == 200 and ok.json()["record"]["severity"] == "sev2"
    stale = client.patch(f"/incidents/{new_id}", json={"severity": "sev1"}, headers={**bearer(editor), "If-Match": tag})
    assert stale.status_code == 412
    bad = client.post(f"/incidents/{new_id}/publish", headers=bearer(editor))
    assert bad.status_code == 422 and {"date", "components"} <= {p["field"] for p in bad.json()["problems"]}
    assert bad.json()["detail"] and all(d["loc"] == ["path", "incident_id"] for d in bad.json()["detail"])  # the record, not a query
    assert client.post(f"/incidents/{new_id}/links", json={"target": "IL-0001", "reason": {"en": "same tier"}},
                       headers=bearer(editor)).status_code == 200
    assert client.delete(f"/incidents/{new_id}/links/IL-0001", headers=bearer(editor)).status_code == 200
    assert client.delete(f"/incidents/{new_id}/links/IL-0001", headers=bearer(editor)).status_code == 409
    assert client.delete(f"/incidents/{new_id}", headers=bearer(editor)).status_code == 200
    assert client.get(f"/incidents/{new_id}").status_code == 404
    assert client.post(f"/incidents/{new_id}/restore", headers=bearer(editor)).status_code == 200
    actions = [e["action"] for e in client.get(f"/incidents/{new_id}/history").json()["items"]]
    assert actions == ["create", "update", "link", "unlink", "delete", "restore"]
    prov = client.get("/history", params={"incident": new_id})
    assert prov.status_code == 200 and "prov:wasAssociatedWith" in prov.text
    assert client.get("/tokens", headers=bearer(editor)).status_code == 403
    listed = client.get("/tokens", headers=bearer(admin)).json()
    assert {t["name"] for t in listed} == {"editor", "reader", "admin"} and all("token" not in t for t in listed)
    made = client.post("/tokens", json={"name": "bot", "role": "editor"}, headers=bearer(admin))
    assert made.status_code == 201 and made.json()["token"].startswith("il_")
    assert client.delete(f"/tokens/{made.json()['id']}", headers=bearer(admin)).json()["active"] is False
    assert client.post("/incidents", json=DRAFT, headers=bearer(made.json()["token"])).status_code == 401


@pytest.mark.slow
def test_openapi_declares_bearer_and_reads_close_with_require_auth(lib: Library) -> None:
    spec = TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL).get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"]["HTTPBearer"]["description"]}
    assert {"post", "get"} <= set(spec["paths"]["/incidents"])
    closed = TestClient(create_app(lib, ServiceSettings(mount_mcp=False, require_auth=True)), base_url=BASE_URL)
    assert closed.get("/incidents").status_code == 401
    assert closed.get("/incidents", headers=bearer(lib.create_token("r", "reader").token)).status_code == 200


@pytest.mark.slow
def test_import_over_http_dry_run_then_for_real(lib: Library) -> None:
    editor = lib.create_token("importer", "editor").token
    client = TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL)
    rows = [{"title": "Tape library jam halts restores", "org": "meta", "body": "A robot arm jammed; restores waited.",
             "url": "https://example.com/tape"}]
    body = {"format": "jsonl", "content": "\n".join(json.dumps(r) for r in rows), "maps": ["source_url=url"], "dry_run": True}
    dry = client.post("/import", json=body, headers=bearer(editor))
    assert dry.status_code == 200, dry.text
    assert len(dry.json()["accepted"]) == 1 and lib.drafts() == []
    real = client.post("/import", json={**body, "dry_run": False}, headers=bearer(editor))
    assert real.status_code == 200, real.text
    drafts = lib.drafts()
    assert [d.id for d in drafts] == [real.json()["accepted"][0]["id"]]
    assert [e.actor for e in lib.history(drafts[0].id).items] == ["importer"]
    bad = client.post("/import", json={**body, "format": "xml"}, headers=bearer(editor))
    assert bad.status_code == 422
    document = {"format": "document", "content": "---\ndate: 2024-03-02\n---\n# Cooling loop leak\n\nA coolant leak "
                "took a row of racks down.\n", "sets": ["org=meta", "source_url=https://example.com/leak"]}
    one = client.post("/import", json=document, headers=bearer(editor))
    assert one.status_code == 200, one.text
    filed = lib.get(one.json()["accepted"][0]["id"])
    assert filed.title.get("en") == "Cooling loop leak" and str(filed.date) == "2024-03-02"


def test_mcp_create_draft_needs_an_editor_token_over_http(lib: Library) -> None:
    editor = lib.create_token("agent", "editor").token
    results: dict[str, object] = {}

    async def session() -> None:
        async with Client(build_mcp_server(lib)) as client:
            results["denied"] = await client.call_tool("create_draft", {"record": DRAFT})
            results["filed"] = await client.call_tool("create_draft", {"record": DRAFT, "token": editor})
            results["invalid"] = await client.call_tool("create_draft", {"record": {**DRAFT, "org": "nobody"}, "token": editor})

    anyio.run(session)
    assert results["denied"].is_error and "token" in results["denied"].content[0].text  # type: ignore[attr-defined]
    filed = results["filed"]
    assert not filed.is_error and filed.structured_content["status"] == "draft"  # type: ignore[attr-defined]
    assert lib.history(filed.structured_content["id"]).items[0].actor == "agent"  # type: ignore[attr-defined]
    assert results["invalid"].is_error and "org" in results["invalid"].content[0].text  # type: ignore[attr-defined]


def test_reject_with_if_match_keeps_a_draft_changed_since(lib: Library) -> None:
    editor = lib.create_token("editor", "editor").token
    client = TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL)
    created = client.post("/incidents", json=DRAFT, headers=bearer(editor))
    new_id, reviewed = created.json()["id"], created.headers["etag"]
    edited = client.patch(f"/incidents/{new_id}", json={"severity": "sev2"}, headers={**bearer(editor), "If-Match": reviewed})
    assert edited.status_code == 200
    stale = client.post(f"/incidents/{new_id}/reject", headers={**bearer(editor), "If-Match": reviewed})
    assert stale.status_code == 412 and client.get(f"/incidents/{new_id}/record").json()["record"]["severity"] == "sev2"
    current = client.post(f"/incidents/{new_id}/reject", headers={**bearer(editor), "If-Match": edited.headers["etag"]})
    assert current.status_code == 200 and client.get(f"/incidents/{new_id}").status_code == 404
