"""Regression tests for the hardening issue: guards, SPARQL confinement, strict bodies, caches, loader, import edges."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.api.errors import json_safe
from incidentlib.api.guards import GuardMiddleware, GuardSettings, RateLimiter, StrictJSONError, check_strict_json
from incidentlib.cli import app as cli_app
from incidentlib.errors import RemoteAccessError
from incidentlib.graph.sparql import REMOTE_REFUSED
from incidentlib.importing import ImportFailed, ImportFormat, ImportOptions, run_import
from incidentlib.loader import Problem, load_library
from incidentlib.search.chunks import incident_chunks, title_passage
from incidentlib.search.engine import SearchConfig

LOCAL = "http://127.0.0.1:8000"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client(search_library):
    settings = ServiceSettings(sparql_timeout=20, guards=GuardSettings(rate_per_second=0))
    with TestClient(create_app(search_library, settings), base_url=LOCAL) as test_client:
        yield test_client


# ---- SSRF: SERVICE / FROM ----------------------------------------------------------

@pytest.fixture()
def listener():
    """A real TCP listener that records whether anything connected to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    connected: list[bool] = []
    yield server.getsockname()[1], server, connected
    server.close()


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return False
    conn.close()
    return True


@pytest.mark.slow  # over a second: the fast subset must stay under a minute
def test_service_and_from_are_refused_before_any_connection(library, listener) -> None:
    port, server, _ = listener
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens here now
    messages = set()
    for query in (
        f"SELECT * WHERE {{ SERVICE <http://127.0.0.1:{port}/sparql> {{ ?s ?p ?o }} }}",
        f"SELECT * WHERE {{ SERVICE SILENT <http://127.0.0.1:{port}/sparql> {{ ?s ?p ?o }} }}",
        f"SELECT * WHERE {{ SERVICE <http://127.0.0.1:{closed_port}/sparql> {{ ?s ?p ?o }} }}",
        f"SELECT * WHERE {{ ?x ?y ?z OPTIONAL {{ SERVICE SILENT <http://127.0.0.1:{port}/x> {{ ?s ?p ?o }} }} }} LIMIT 1",
        f"SELECT * FROM <http://127.0.0.1:{port}/data.ttl> WHERE {{ ?s ?p ?o }}",
        f"SELECT * FROM NAMED <http://127.0.0.1:{port}/data.ttl> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
    ):
        with pytest.raises(RemoteAccessError) as caught:
            library.sparql(query)
        messages.add(str(caught.value))
    assert messages == {REMOTE_REFUSED}  # one text whatever the target: no port scanner
    assert not _accepted(server)


def test_rdflib_service_evaluation_is_unreachable(library, listener) -> None:
    """Even bypassing our algebra check, rdflib's SERVICE evaluation refuses before connecting."""
    from rdflib.plugins.sparql import prepareQuery

    port, server, _ = listener
    prepared = prepareQuery(f"SELECT * WHERE {{ SERVICE <http://127.0.0.1:{port}/x> {{ ?s ?p ?o }} }}")
    with pytest.raises(RemoteAccessError):
        list(library._rdf.query(prepared))
    assert not _accepted(server)


def test_service_over_http_is_400_with_the_same_text(client, listener) -> None:
    port, server, _ = listener
    for query in (f"SELECT * WHERE {{ SERVICE SILENT <http://127.0.0.1:{port}/x> {{ ?s ?p ?o }} }}",
                  "SELECT * WHERE { SERVICE <http://10.255.255.1:1/x> { ?s ?p ?o } }"):
        response = client.get("/sparql", params={"query": query})
        assert response.status_code == 400 and response.json()["detail"] == REMOTE_REFUSED
    assert not _accepted(server)


# ---- Host / Origin / CORS / cross-site forms -----------------------------------------

def test_host_and_origin_allow_list(client) -> None:
    assert client.get("/health").status_code == 200
    for host in ("localhost:8000", "[::1]:8000", "127.0.0.1"):
        assert client.get("/health", headers={"host": host}).status_code == 200
    rebinding = client.get("/health", headers={"host": "attacker.example:8000"})
    assert rebinding.status_code == 421 and "attacker" not in rebinding.text
    assert client.get("/health", headers={"origin": "http://attacker.example"}).status_code == 403
    assert client.get("/health", headers={"origin": "null"}).status_code == 403
    assert client.get("/health", headers={"origin": LOCAL}).status_code == 200  # same origin (the /docs page)
    assert "access-control-allow-origin" not in client.get("/health", headers={"origin": LOCAL}).headers  # CORS off


def test_cross_site_form_post_is_refused(client) -> None:
    form = {"query": "ASK { ?s ?p ?o }"}
    assert client.post("/sparql", data=form, headers={"origin": "https://attacker.example"}).status_code == 403
    assert client.post("/sparql", data=form, headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert client.post("/sparql", data=form, headers={"origin": LOCAL}).status_code == 200


def test_configured_hosts_and_cors(search_library) -> None:
    guards = GuardSettings(allowed_hosts=("incidents.internal",), cors_origins=("https://dash.internal",), rate_per_second=0)
    with TestClient(create_app(search_library, ServiceSettings(mount_mcp=False, host="0.0.0.0", guards=guards)),
                    base_url="http://incidents.internal") as configured:
        ok = configured.get("/health", headers={"origin": "https://dash.internal"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://dash.internal"
        # 0.0.0.0 is not a name: it does not widen the allow-list
        assert configured.get("/health", headers={"host": "0.0.0.0:8000"}).status_code == 421
        assert configured.get("/health", headers={"host": "192.168.1.5:8000"}).status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])
def test_mcp_rebinding_protection_for_any_listen_host(search_library, host: str) -> None:
    with TestClient(create_app(search_library, ServiceSettings(host=host)), base_url=LOCAL) as mcp_client:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        accept = {"accept": "application/json, text/event-stream"}
        assert mcp_client.post("/mcp", json=hello, headers={**accept, "origin": "http://attacker.example"}).status_code == 403
        assert mcp_client.post("/mcp", json=hello, headers={**accept, "host": "attacker.example"}).status_code == 421
        assert mcp_client.post("/mcp", json=hello, headers=accept).status_code == 200


# ---- bodies: size limit, strict JSON, safe 422 ------------------------------------

def test_body_limit_is_short_and_never_echoes(client) -> None:
    marker = "ZZQQ" * 20
    big = json.dumps({"text": marker + "x" * 600_000})
    response = client.post("/similar", content=big, headers=JSON)
    assert response.status_code == 413 and len(response.content) < 200 and marker not in response.text

    def chunks():
        yield b'{"text": "' + marker.encode()
        for _ in range(100):
            yield b"y" * 10_000
        yield b'"}'

    streamed = client.post("/diagnose", content=chunks(), headers=JSON)  # no Content-Length: counted as it arrives
    assert streamed.status_code == 413 and marker not in streamed.text


@pytest.mark.parametrize("path,body", [
    ("/similar", b'{"text": "\\ud800 gpu"}'),
    ("/similar", b'{"text": "gpu", "k": 1e400}'),
    ("/similar", b'{"text": "gpu", "k": NaN}'),
    ("/similar", b'{"text": "gpu", "k": -Infinity}'),
    ("/diagnose", b'{"text": "gpu", "limit": 1e400}'),
    ("/diagnose", b'{"text": "\\udfff"}'),
    ("/diagnose", b'{"symptoms": ["\\ud83d"]}'),
    ("/diagnose", b'{"limit": ' + b"9" * 5000 + b'}'),
])
def test_non_interoperable_json_is_422_not_500(client, path: str, body: bytes) -> None:
    response = client.post(path, content=body, headers=JSON)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail[0]["loc"] == ["body"] and "invalid JSON" in detail[0]["msg"]


def test_a_body_that_is_not_utf8_is_named_so(client) -> None:
    for path in ("/similar", "/diagnose"):
        response = client.post(path, content=b'{"text": "\xff\xfe disk"}', headers=JSON)
        assert response.status_code == 422, path
        message = response.json()["detail"][0]["msg"]
        assert "not UTF-8" in message and "byte 10" in message and "number" not in message


def test_validation_errors_never_echo_input_and_always_encode(client) -> None:
    response = client.post("/diagnose", content=json.dumps({"text": "x" * 2500}), headers=JSON)
    assert response.status_code == 422 and "xxxx" not in response.text
    assert json_safe({"a": ["\ud800", float("inf"), float("nan")]}) == {"a": ["\ufffd", "inf", "nan"]}
    json.dumps(json_safe(["\udfff", {"\ud800": -float("inf")}]), allow_nan=False).encode("utf-8")
    check_strict_json(b'{"text": "\\ud83d\\ude00 ok", "k": 1.5e300}')  # a paired surrogate is fine
    with pytest.raises(StrictJSONError):
        check_strict_json(b'[Infinity]')


# ---- OpenAPI contract ----------------------------------------------------------

def test_contract_fixes(client) -> None:
    bad_filter = client.get("/incidents", params={"org": "no-such-org"})
    assert bad_filter.status_code == 422 and bad_filter.json()["detail"][0]["loc"] == ["query", "org"]
    assert client.post("/diagnose", json={}).json()["detail"][0]["type"]  # the array shape, as documented
    everything = client.get("/incidents", params={"limit": 500}).json()["total"]
    for name in ("org", "component", "cause", "symptom", "tag"):
        empty = client.get("/incidents", params={name: "", "limit": 500})
        assert empty.status_code == 200 and empty.json()["total"] == everything
    options = client.options("/sparql")
    assert options.status_code == 204 and {"GET", "POST"} <= {m.strip() for m in options.headers["allow"].split(",")}
    schema = client.get("/openapi.json").json()
    assert {"400", "413", "415", "503"} <= schema["paths"]["/sparql"]["post"]["responses"].keys()
    assert {"400", "413", "429"} <= schema["paths"]["/diagnose"]["post"]["responses"].keys()
    documented_422 = schema["paths"]["/diagnose"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]
    assert documented_422["$ref"].endswith("/HTTPValidationError")


# ---- rate limits and bounded workers ------------------------------------------------

def test_rate_limit_per_client(search_library) -> None:
    guards = GuardSettings(rate_per_second=0.01, rate_burst=3)
    with TestClient(create_app(search_library, ServiceSettings(mount_mcp=False, guards=guards)), base_url=LOCAL) as limited:
        codes = [limited.get("/search", params={"q": "nccl", "k": 1}).status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
        refused = limited.get("/search", params={"q": "nccl"})
        assert int(refused.headers["retry-after"]) >= 1
        assert limited.get("/health").status_code == 200  # cheap routes are not limited

    clock = [0.0]
    limiter = RateLimiter(rate=2.0, burst=2, clock=lambda: clock[0])
    assert [limiter.take("a"), limiter.take("a"), limiter.take("a")] == [None, None, 1]
    assert limiter.take("b") is None  # per client
    clock[0] += 0.5
    assert limiter.take("a") is None


def test_heavy_routes_beyond_the_queue_get_503_at_once() -> None:
    release = anyio.Event()
    started = []

    async def slow_app(scope, receive, send):
        started.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = GuardMiddleware(slow_app, "127.0.0.1", GuardSettings(heavy_workers=1, heavy_queue=1, rate_per_second=0))
    statuses: list[int] = []
    headers: list[dict[bytes, bytes]] = []

    async def call() -> None:
        scope = {"type": "http", "method": "GET", "path": "/search", "headers": [(b"host", b"127.0.0.1:8000")],
                 "client": ("127.0.0.1", 1)}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                headers.append(dict(message["headers"]))

        await guard(scope, receive, send)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(call)
            while len(statuses) < 2:  # one runs, one waits, two are refused at once
                await anyio.sleep(0.01)
            assert statuses == [503, 503] and len(started) == 1
            release.set()

    anyio.run(main)
    assert sorted(statuses) == [200, 200, 503, 503]
    assert all(h[b"retry-after"] == b"1" for h, s in zip(headers, statuses, strict=True) if s == 503)


# ---- index cache verification ------------------------------------------------------

@pytest.fixture()
def tiny(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "lib", data_dir, ["IL-0025", "IL-0076"])


def _build(root: Path, cache: Path):
    """The verification is the store's, whatever the model: the instant hashed embedder stands in for it."""
    lib = Library(load_library(root), SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    return lib, lib.build_index()


def _build_dir(cache: Path) -> Path:
    return next(cache.rglob("build-*"))


@pytest.mark.parametrize("damage", ["empty-rows", "nan-vectors", "bad-meta", "missing-file", "wrong-shape"])
def test_damaged_cache_is_rebuilt_with_a_warning(tiny: Path, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    _, first = _build(tiny, cache)
    assert first.action == "built" and first.warning is None
    build = _build_dir(cache)
    meta_path = build.parent / "meta.json"
    meta = json.loads(meta_path.read_text())
    if damage == "empty-rows":
        lines = (build / "chunks.jsonl").read_text().splitlines()
        (build / "chunks.jsonl").write_text("{}\n" * len(lines))
    elif damage == "nan-vectors":  # right shape, NaN values, and a checksum that matches them
        vectors = np.load(build / "vectors.npy")
        np.save(build / "vectors.npy", np.full_like(vectors, np.nan))
    elif damage == "bad-meta":
        meta_path.write_text("{not json")
    elif damage == "missing-file":
        (build / ("index.faiss" if meta["index_kind"] == "hnsw" else "vectors.npy")).unlink()  # the index file of its kind
    elif damage == "wrong-shape":
        np.save(build / "vectors.npy", np.zeros((3, 7), dtype=np.float32))
    if damage in ("empty-rows", "nan-vectors", "wrong-shape"):  # defeat the checksum: the content checks must catch it
        from incidentlib.checksum import checksum_file

        meta["checksums"] = {name: checksum_file(build / name) for name in meta["checksums"]}
        if damage == "empty-rows":
            # the rows file is parsed when meta.json has no digest of the rows (an older build) or the chunks
            # differ from them; with the digest, the rows are the chunks and the file's content is never used
            meta.pop("rows_digest")
        meta_path.write_text(json.dumps(meta))
    lib, report = _build(tiny, cache)
    assert report.action == "built" and report.warning and "damaged" in report.warning
    assert np.isfinite(np.load(_build_dir(cache) / "vectors.npy")).all()
    assert lib.search("nccl timeout", k=1).results
    assert _build(tiny, cache)[1].action == "reused"  # the rebuilt cache is sound


# ---- loader: directories and dangling symlinks named *.yaml ---------------------------

def test_directory_and_dangling_symlink_named_yaml(tiny: Path) -> None:
    (tiny / "incidents" / "folder.yaml").mkdir()
    (tiny / "incidents" / "IL-0999.yaml").symlink_to(tiny / "nowhere.yaml")
    (tiny / "vocab" / "gone.yml").symlink_to(tiny / "nowhere.yml")
    runner = CliRunner()
    result = runner.invoke(cli_app, ["validate", "--data", str(tiny)])
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
    for name in ("incidents/folder.yaml", "incidents/IL-0999.yaml", "vocab/gone.yml"):
        assert f"{name}: not a regular file" in result.output
    assert "Traceback" not in result.output
    served = runner.invoke(cli_app, ["serve", "--data", str(tiny), "--port", "0"])
    assert served.exit_code != 0 and isinstance(served.exception, SystemExit) and "not a regular file" in served.output


# ---- files written by export/map follow the umask --------------------------------------

def test_written_files_follow_the_umask(tmp_path: Path, tiny: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "lib.ttl"
        result = CliRunner().invoke(cli_app, ["export", "--data", str(tiny), "--format", "ttl", "--output", str(out)])
        assert result.exit_code == 0, result.output
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        os.umask(0o027)
        out.unlink()
        CliRunner().invoke(cli_app, ["export", "--data", str(tiny), "--format", "ttl", "--output", str(out)])
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)


# ---- import: new folder dry run, linkless Markdown, drafts ------------------------------

MARKDOWN = """# Postmortems

A list of public write-ups.

## Config

[Allegro](https://allegro.tech/2018/08/postmortem-why-allegro-went-down.html). The Allegro platform suffered a failure.

[Acme]. Acme lost a region for an hour.

- Foo Corp. A deploy broke every front end.
"""


def test_dry_run_into_a_new_directory(tmp_path: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    fresh = tmp_path / "new-lib"
    result = CliRunner().invoke(cli_app, ["import", str(source), "--format", "markdown", "--into", str(fresh), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would add 1" in result.output
    assert not fresh.exists() and [p.name for p in tmp_path.iterdir()] == ["list.md"]


def test_linkless_markdown_entries_are_reported_rejected(tmp_path: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    report = run_import(source, tmp_path / "lib", ImportOptions(format=ImportFormat.markdown))
    assert [a.location for a in report.accepted] == ["list.md:7"]
    assert {r.location: r.reasons for r in report.rejected} == {
        "list.md:9": ["no source URL (map one with --map source_url=…)"],
        "list.md:11": ["no source URL (map one with --map source_url=…)"],
    }
    assert report.new_organizations == ["allegro"]  # rejected records add no vocabulary


def test_english_only_draft_passages_and_output(tmp_path: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    target = tmp_path / "lib"
    run_import(source, target, ImportOptions(format=ImportFormat.markdown))
    lib = Library.open(target)
    draft = lib.get("IL-0001")
    chunks = incident_chunks(draft, lib.vocab)
    assert {c.lang for c in chunks if c.kind == "title"} == {"en"}
    assert all(".." not in c.text for c in chunks)
    assert title_passage("Disk full.", "The disk filled up.") == "Disk full. The disk filled up."
    assert title_passage("Disk full", "The disk filled up.") == "Disk full. The disk filled up."
    assert title_passage("Same.", "Same.") == "Same."
    result = CliRunner().invoke(cli_app, ["search", "Allegro platform failure", "--data", str(target), "--mode", "lexical",
                                          "--lang", "ko", "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert "None" not in result.output and "date unknown" in result.output and "title/ko" not in result.output


def test_import_cleans_up_after_a_failed_rehearsal(tmp_path: Path, tiny: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    before = sorted(p.relative_to(tiny).as_posix() for p in tiny.rglob("*"))
    (tiny / "vocab" / "imported-organization.yaml").write_text("kind: organization\nconcepts: [{id: allegro}]\n")
    with pytest.raises(Exception, match=r"nothing was written|problems"):
        run_import(source, tiny, ImportOptions(format=ImportFormat.markdown))
    after = sorted(p.relative_to(tiny).as_posix() for p in tiny.rglob("*"))
    assert after == sorted([*before, "vocab/imported-organization.yaml"])  # no journal, no rehearsal copy left


def test_a_failed_rehearsal_leaves_every_file_of_the_library_as_it_was(
        tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rehearsal's files are links to the library's; the vocabulary file the import replaces there (a new
    organization) must be replaced in the rehearsal only."""
    from incidentlib.importing import pipeline

    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    for path, org, number in ((first, "Zeta Labs", 1), (second, "Omega Works", 2)):
        path.write_text(json.dumps({"title": f"Queue {number} stalled", "summary": "Consumers stalled after a deploy.",
                                    "org": org, "url": f"https://example.org/{number}"}) + "\n", encoding="utf-8")
    assert run_import(first, tiny, ImportOptions(format=ImportFormat.jsonl)).written
    vocabulary = tiny / "vocab" / "imported-organization.yaml"
    assert "zeta-labs" in vocabulary.read_text(encoding="utf-8")
    contents = {p: p.read_bytes() for p in tiny.rglob("*") if p.is_file()}
    checked: list[str] = []
    real_check = pipeline.check_library

    def failing_check(root: Path, **options: Any) -> tuple[object, list[Problem]]:
        data, problems = real_check(root, **options)
        if Path(root).name == "incidentlib-import-rehearsal":
            checked.append((Path(root) / "vocab" / "imported-organization.yaml").read_text(encoding="utf-8"))
            problems = [*problems, Problem(file=str(root), message="refused by the test")]
        return data, problems

    monkeypatch.setattr(pipeline, "check_library", failing_check)
    with pytest.raises(ImportFailed, match="refused by the test"):
        run_import(second, tiny, ImportOptions(format=ImportFormat.jsonl))
    assert len(checked) == 1 and "omega-works" in checked[0]  # the rehearsal held the new vocabulary file
    assert {p: p.read_bytes() for p in tiny.rglob("*") if p.is_file()} == contents  # and the library did not


def test_imported_records_follow_the_umask_and_the_library_keeps_one_link_per_file(tmp_path: Path, tiny: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    old = os.umask(0o027)
    try:
        report = run_import(source, tiny, ImportOptions(format=ImportFormat.markdown))
    finally:
        os.umask(old)
    assert report.written and len(report.accepted) == 1
    written = tiny / "incidents" / f"{report.accepted[0].id}.yaml"
    assert stat.S_IMODE(written.stat().st_mode) == 0o640 and "Allegro" in written.read_text(encoding="utf-8")
    assert all(p.stat().st_nlink == 1 for p in tiny.rglob("*") if p.is_file())  # the rehearsal's links are gone


def test_files_written_durably_hold_their_payload_whole(tmp_path: Path) -> None:
    from incidentlib.storage import write_durably

    (tmp_path / "0.yaml").write_text("a much longer text that was there before\n", encoding="utf-8")
    payloads = {tmp_path / f"{n}.yaml": f"id: IL-{n:04d}\n".encode() * (n % 7 + 1) for n in range(40)}
    write_durably(iter(payloads.items()))  # one pass over the files is enough
    assert {path: path.read_bytes() for path in payloads} == payloads  # the longer old text is gone, not kept past
    with pytest.raises(FileNotFoundError):
        write_durably([(tmp_path / "missing" / "x.yaml", b"x")])


def test_every_file_written_durably_is_flushed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names as text or paths; more files than flushing threads, each flushed once from its thread's share."""
    from incidentlib import storage

    flushed: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(storage.os, "fsync", fsync)
    monkeypatch.setattr(storage, "_syncfs", lambda: None)  # as where syncfs does not report errors
    names = [str(tmp_path / f"{n}.yaml") for n in range(storage.FSYNC_THREADS * 3 + 5)]
    storage.write_durably([(name if n % 2 else Path(name), b"x") for n, name in enumerate(names)])
    assert sorted(flushed) == sorted(names)


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="syncfs is Linux's")
def test_files_written_durably_are_flushed_by_one_syncfs_per_file_system(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes
    import errno

    from incidentlib import storage

    calls: list[str] = []
    failing = False

    def syncfs(fd: int) -> int:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        if failing:
            ctypes.set_errno(errno.EIO)
            return -1
        return 0

    monkeypatch.setattr(storage, "_syncfs", lambda: syncfs)
    monkeypatch.setattr(storage.os, "fsync", lambda fd: pytest.fail("a file flushed one by one"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    payloads = {str(tmp_path / folder / f"{n}.yaml"): f"n: {n}\n".encode() for folder in "ab" for n in range(20)}
    storage.write_durably(payloads.items())
    assert calls == [str(tmp_path / "a")]  # two folders, one file system
    assert {name: Path(name).read_bytes() for name in payloads} == payloads
    failing = True
    with pytest.raises(OSError, match="writing files to disk failed") as raised:
        storage.write_durably([(str(tmp_path / "b" / "late.yaml"), b"x")])
    assert raised.value.errno == errno.EIO and raised.value.filename == str(tmp_path / "b")


def test_syncfs_is_used_only_where_it_reports_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from incidentlib import storage

    try:
        for release, expected in (("5.4.0-150-generic", False), ("5.8.0", True), ("6.18.44-fc", True)):
            monkeypatch.setattr(storage.os, "uname", lambda release=release: SimpleNamespace(release=release))
            monkeypatch.setattr(storage.sys, "platform", "linux")
            storage._syncfs.cache_clear()
            assert (storage._syncfs() is not None) is expected, release
        monkeypatch.setattr(storage.sys, "platform", "darwin")
        storage._syncfs.cache_clear()
        assert storage._syncfs() is None
    finally:
        monkeypatch.undo()
        storage._syncfs.cache_clear()


def test_a_commit_stopped_while_its_files_are_moved_is_completed_by_the_next_reader(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Some staged files moved into place, then a stop: recovery moves the rest and skips the ones already there."""
    from incidentlib import journal

    root = tmp_path / "lib"
    (root / "incidents").mkdir(parents=True)
    files = {f"incidents/IL-{n:04d}.yaml": f"id: IL-{n:04d}\n".encode() for n in range(6)} | {"vocab/imported-tag.yaml": b"kind: tag\n"}
    real_replace = os.replace
    moved: list[str] = []

    def replace(source: Any, destination: Any) -> None:
        staged = f"{os.sep}{journal.STAGED}{os.sep}" in os.fspath(source)
        if staged and len(moved) == 3:
            raise KeyboardInterrupt
        real_replace(source, destination)
        if staged:
            moved.append(os.fspath(destination))

    monkeypatch.setattr(journal.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        journal.commit_files(root, files)
    monkeypatch.setattr(journal.os, "replace", real_replace)
    assert len(moved) == 3 and (root / journal.JOURNAL_DIR).is_dir()
    assert journal.recover(root) == "completed"
    assert {rel: (root / rel).read_bytes() for rel in files} == files
    assert not (root / journal.JOURNAL_DIR).exists()
