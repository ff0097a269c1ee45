"""The three graph stores give the same answers, load only when needed, and fail clearly."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from incidentlib import Library
from incidentlib.errors import GraphStoreError, InvalidRequest, ReadOnlyError, RemoteAccessError, SparqlTimeout
from incidentlib.graph.projection import build_projection
from incidentlib.graph.rdf import build_graph, graph_delta
from incidentlib.graph.store import (
    GraphStore,
    GraphStoreConfig,
    StoreKind,
    ensure_loaded,
    follow_change,
    graph_content_hash,
    open_store,
    parse_graph_store,
)
from incidentlib.graph.store_oxigraph import OxigraphStore
from incidentlib.graph.store_remote import RemoteStore
from incidentlib.loader import LibraryData, load_library
from tests._oxigraph import oxigraph_server
from tests.conftest import on_store, small_library

PERSISTENT = ("oxigraph", pytest.param("server", marks=pytest.mark.slow))  # a server process: the slow subset
QUERIES = [
    # a SELECT with every kind of term: IRIs, language-tagged and typed literals, unbound values
    """SELECT ?id ?date ?title ?severity WHERE { ?i a il:Incident ; dcterms:identifier ?id ; dcterms:title ?title .
         FILTER(lang(?title) = "ko") OPTIONAL { ?i dcterms:date ?date } OPTIONAL { ?i il:severity ?severity } }
       ORDER BY ?id""",
    """SELECT ?kind (COUNT(?c) AS ?n) WHERE { ?c a skos:Concept ; il:conceptKind ?kind } GROUP BY ?kind ORDER BY ?kind""",
    """SELECT ?a ?b WHERE { ?x dcterms:identifier ?a ; dcterms:relation ?y . ?y dcterms:identifier ?b } ORDER BY ?a ?b""",
    'ASK { ?i dcterms:identifier "IL-0025" ; il:hasComponent ?c . ?c skos:notation "nccl" }',
    'ASK { ?i dcterms:identifier "IL-9999" }',
]
GRAPH_QUERIES = [
    "CONSTRUCT { ?c skos:prefLabel ?l } WHERE { ?c skos:prefLabel ?l ; il:conceptKind 'cause' }",
    "DESCRIBE <https://w3id.org/incidentlib/id/incident/IL-0025>",
]


def _rows(library: Library, query: str) -> tuple[str, object]:
    result = library.sparql(query)
    return result.type, result.rows if result.type == "SELECT" else result.boolean


@pytest.mark.parametrize("store", PERSISTENT)
def test_projection_is_the_one_the_files_give(request, store: str) -> None:
    """NetworkX is fed from the store; nodes, edges, attributes and insertion order equal the file-built projection."""
    library = on_store(request, store)
    from_files = build_projection(library.data)
    projection = library._knowledge.nx
    assert projection.number_of_edges() > 1000
    assert list(projection.nodes(data=True)) == list(from_files.nodes(data=True))
    assert list(projection.edges(data=True)) == list(from_files.edges(data=True))


@pytest.mark.parametrize("store", PERSISTENT)
def test_graph_answers_are_identical_across_stores(request, store: str) -> None:
    memory, other = on_store(request, "memory"), on_store(request, store)
    for incident_id in ("IL-0025", "IL-0101", "IL-0126", memory.incidents()[-1].id):
        assert other.related(incident_id, limit=None) == memory.related(incident_id, limit=None)
    for concept in ("nccl", "gpu", "infiniband-fabric", "imbue"):
        assert other.topic(concept, lang="ko") == memory.topic(concept, lang="ko")
    assert other.neighbors("IL-0025", depth=2) == memory.neighbors("IL-0025", depth=2)
    for source, target in (("IL-0025", "IL-0101"), ("InfiniBand", "NCCL"), ("IL-0025", "IL-0021")):
        assert other.path(source, target) == memory.path(source, target)
    for query in QUERIES:
        assert _rows(other, query) == _rows(memory, query), query
    assert other.sparql(QUERIES[0]).json_results == memory.sparql(QUERIES[0]).json_results


@pytest.mark.slow
@pytest.mark.parametrize("store", PERSISTENT)
def test_exports_and_graph_queries_are_identical_across_stores(request, store: str) -> None:
    from rdflib import Graph
    from rdflib.compare import isomorphic

    memory, other = on_store(request, "memory"), on_store(request, store)
    assert other.export("nt") == memory.export("nt")  # sorted N-Triples: byte for byte
    assert other.export("jsonl") == memory.export("jsonl")
    ours, theirs = (nx.read_graphml(io.BytesIO(lib.export("graphml").encode())) for lib in (memory, other))
    assert list(theirs.nodes(data=True)) == list(ours.nodes(data=True))
    assert list(theirs.edges(data=True)) == list(ours.edges(data=True))
    for query in GRAPH_QUERIES:
        a, b = (Graph().parse(data=lib.sparql(query).turtle, format="turtle") for lib in (memory, other))
        assert len(a) > 0, query
        assert isomorphic(a, b), query


@pytest.mark.parametrize("store", PERSISTENT)
def test_guards_hold_on_every_store(request, store: str) -> None:
    """The read-only guard and the no-remote-data guard run before any store sees the query."""
    library = on_store(request, store)
    count = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
    before = library.sparql(count).rows
    with pytest.raises(ReadOnlyError, match="read-only"):
        library.sparql("DELETE WHERE { ?s ?p ?o }")
    with pytest.raises(RemoteAccessError, match="SERVICE"):
        library.sparql("SELECT * WHERE { SERVICE <http://127.0.0.1:9/sparql> { ?s ?p ?o } }")
    with pytest.raises(RemoteAccessError):
        library.sparql("SELECT * FROM <http://127.0.0.1:9/data.ttl> WHERE { ?s ?p ?o }")
    assert library.sparql(count).rows == before


def _small(tmp_path: Path, data_dir: Path, ids: list[str]) -> Path:
    return small_library(tmp_path / "lib", data_dir, ids)


def test_embedded_store_loads_once_and_reloads_when_the_library_changes(tmp_path: Path, data_dir: Path) -> None:
    root = _small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126"])
    config = GraphStoreConfig(kind=StoreKind.oxigraph, location=str(tmp_path / "ox"))
    data = load_library(root)
    store = OxigraphStore(config)
    assert store.stored_hash() is None
    assert ensure_loaded(store, data) is True
    assert store.stored_hash() == graph_content_hash(data)
    store.close()

    reopened = OxigraphStore(config)  # a restart: same files, nothing reloaded
    assert ensure_loaded(reopened, data) is False
    reopened.close()

    grown = small_library(tmp_path / "grown", data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0133"])
    shutil.rmtree(root / "incidents")
    shutil.copytree(grown / "incidents", root / "incidents")  # the same library, one record added
    changed = load_library(root)
    assert graph_content_hash(changed) != graph_content_hash(data)
    library = Library(changed, graph_store=config)
    ids = [row["id"] for row in library.sparql("SELECT ?id WHERE { ?i a il:Incident ; dcterms:identifier ?id } ORDER BY ?id").rows]
    assert ids == ["IL-0021", "IL-0025", "IL-0126", "IL-0133"]
    assert library.related("IL-0133", limit=None) == Library(changed).related("IL-0133", limit=None)


@pytest.mark.slow
def test_replicas_share_one_server_and_the_second_does_not_reload(tmp_path: Path, data_dir: Path) -> None:
    """Two libraries (two replicas) on one `oxigraph serve`: the first loads, the second finds the hash and reads."""
    root = _small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0133"])
    with oxigraph_server(tmp_path / "server") as url:
        config = parse_graph_store(url)
        first, second = Library.open(root, graph_store=url), Library.open(root, graph_store=config)
        assert ensure_loaded(RemoteStore(config), first.data) is True  # an empty server is loaded
        assert ensure_loaded(RemoteStore(config), second.data) is False  # the second replica reuses it
        assert second.related("IL-0025", limit=None) == first.related("IL-0025", limit=None) == \
            Library.open(root).related("IL-0025", limit=None)
        # the content hash lives in its own named graph: queries over the default graph never see it
        assert second.sparql('ASK { ?s ?p ?o FILTER(CONTAINS(STR(?p), "contentHash")) }').boolean is False
        assert RemoteStore(config).stored_hash() == graph_content_hash(first.data)


def test_bad_specs_and_unreachable_stores_are_clear_errors(tmp_path: Path, data_dir: Path) -> None:
    for bad in ("oxigraph:", "sqlite:/tmp/x", "ftp://example.org/sparql"):
        with pytest.raises(InvalidRequest, match="--graph-store"):
            parse_graph_store(bad)
    assert parse_graph_store(None).kind is StoreKind.memory
    assert parse_graph_store("oxigraph:/srv/graph").spec == "oxigraph:/srv/graph"
    from tests._server import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    library = Library(load_library(_small(tmp_path, data_dir, ["IL-0025"])), graph_store=parse_graph_store(url))
    with pytest.raises(GraphStoreError, match=f"--graph-store {url}: cannot reach {url}/query"):
        library.related("IL-0025")


@pytest.mark.slow
def test_sparql_runner_time_limit_and_network_on_a_remote_store(tmp_path: Path, data_dir: Path) -> None:
    """The passthrough's forked worker reaches the store's endpoint and nothing else, and is stopped at the limit."""
    from incidentlib.api.sparql_runner import SparqlRunner

    root = _small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0133"])
    # the server's own limit keeps a stopped query from running on there after the worker is gone
    with oxigraph_server(tmp_path / "server", "--timeout-s", "3") as url:
        library = Library.open(root, graph_store=url)
        runner = SparqlRunner(max_concurrent=1)
        runner.start(library)
        try:
            answer = asyncio.run(runner.run(library, "SELECT ?id WHERE { ?i dcterms:identifier ?id } ORDER BY ?id", 10))
            assert [row["id"] for row in answer.rows] == ["IL-0021", "IL-0025", "IL-0126", "IL-0133"]
            with pytest.raises(RemoteAccessError):
                asyncio.run(runner.run(library, "SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }", 10))
            explode = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }"
            with pytest.raises(SparqlTimeout, match="time limit"):
                asyncio.run(runner.run(library, explode, 1))
            again = asyncio.run(runner.run(library, 'ASK { ?i dcterms:identifier "IL-0025" }', 10))
            assert again.boolean is True  # the host survives a stopped worker
        finally:
            runner.stop()


_EMBEDDED_RUNNER = """
import asyncio, json, sys
from incidentlib import Library
from incidentlib.api.sparql_runner import SparqlRunner
library = Library.open(sys.argv[1], graph_store="oxigraph:" + sys.argv[2])
runner = SparqlRunner(max_concurrent=1)
runner.start(library)
try:
    answer = asyncio.run(runner.run(library, "SELECT ?id WHERE { ?i dcterms:identifier ?id } ORDER BY ?id", 10))
    print(json.dumps({"ids": [row["id"] for row in answer.rows], "payload": json.dumps(answer.json_results)}))
finally:
    runner.stop()
"""


@pytest.mark.slow
def test_sparql_runner_on_an_embedded_store(tmp_path: Path, data_dir: Path) -> None:
    """Forked hosts hold the open Oxigraph store; each query's worker reads it.  Run in a fresh process, as ``serve``
    forks its hosts: a test process has threads left by earlier tests (BLAS, engine legs), and a fork taken while
    one of them holds a lock can leave the forked worker waiting on it until the query's time limit."""
    import subprocess
    import sys

    root = _small(tmp_path, data_dir, ["IL-0025", "IL-0021"])
    done = subprocess.run([sys.executable, "-c", _EMBEDDED_RUNNER, str(root), str(tmp_path / "ox")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["ids"] == ["IL-0021", "IL-0025"]
    assert "IL-0025" in answer["payload"]


@pytest.mark.parametrize("store", ["memory", "oxigraph"])
def test_changed_data_reaches_the_graph_store(tmp_path: Path, data_dir: Path, store: str) -> None:
    """When a library's records change in place, the graph store follows: memory is rebuilt, Oxigraph reloaded."""
    before = load_library(_small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126"]))
    after = load_library(small_library(tmp_path / "after", data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0133"]))
    spec = "memory" if store == "memory" else f"oxigraph:{tmp_path / 'ox'}"
    library = Library(before, graph_store=parse_graph_store(spec))
    ask = 'ASK { ?i dcterms:identifier "IL-0133" }'
    assert library.sparql(ask).boolean is False
    assert "IL-0133" not in {item.id for item in library.related("IL-0025", limit=None)}
    library.data = after
    assert library._sync_graph_store() == ("dropped" if store == "memory" else "loaded")  # no delta known: whole
    assert library.sparql(ask).boolean is True
    assert library.related("IL-0025", limit=None) == Library(after).related("IL-0025", limit=None)
    # unchanged data: a persistent store is not reloaded
    assert library._sync_graph_store() == ("dropped" if store == "memory" else "current")


def _nt_set(ntriples: bytes) -> set[str]:
    """N-Triples as a set of canonical lines (parsed by Oxigraph's native parser: fast, and one canonical form)."""
    import pyoxigraph

    return {f"{q.subject} {q.predicate} {q.object}" for q in pyoxigraph.parse(ntriples, pyoxigraph.RdfFormat.N_TRIPLES)}


def _triples(store: GraphStore) -> set[str]:
    return _nt_set(store.dump())


def _built(data: LibraryData) -> set[str]:
    return _nt_set(build_graph(data).serialize(format="nt", encoding="utf-8"))


def _changes(data: LibraryData, rng: random.Random, serial: int) -> LibraryData:
    """``data`` with a few random edits: an incident removed, one retitled and losing a source, one added that
    cites another's sources (shared source descriptions), one gaining an inferred concept."""
    incidents = dict(data.incidents)
    ids = sorted(incidents)
    removed, retitled, copied, tagged = rng.sample(ids, 4)
    incidents.pop(removed)
    old = incidents[retitled]
    incidents[retitled] = old.model_copy(update={
        "title": old.title.model_copy(update={"en": f"{old.title.en} (revision {serial})"}),
        "sources": old.sources[1:] or old.sources})
    twin = incidents[copied]
    new_id = f"IL-9{serial:03d}"
    incidents[new_id] = twin.model_copy(update={"id": new_id, "related": []})
    target = incidents[tagged]
    if target.inferred:
        incidents[tagged] = target.model_copy(update={"inferred": target.inferred[:-1]})
    grown = dict(incidents)
    # curated links to a removed incident go with it, as the write rules require
    for key, incident in grown.items():
        if any(link.id == removed for link in incident.related):
            incidents[key] = incident.model_copy(update={"related": [link for link in incident.related if link.id != removed]})
    return replace(data, incidents=dict(sorted(incidents.items())), content_hash=f"{data.content_hash}+{serial}")


@pytest.mark.parametrize("store", ["memory", pytest.param("oxigraph", marks=pytest.mark.slow),
                                   pytest.param("server", marks=pytest.mark.slow)])
def test_patched_stores_hold_exactly_the_rebuilt_graph(tmp_path: Path, data_dir: Path, store: str) -> None:
    """Three rounds of random changes, each applied as a patch: after every round the store holds the triples a
    full build of the new data gives, and its hash is the new data's."""
    ids = sorted(path.stem for path in (data_dir / "incidents").glob("IL-*.yaml"))
    data = load_library(_small(tmp_path, data_dir, random.Random(5).sample(ids, 7)))
    rng = random.Random(20261130)
    with contextlib.ExitStack() as stack:
        if store == "server":
            config = parse_graph_store(stack.enter_context(oxigraph_server(tmp_path / "server")))
        else:
            config = parse_graph_store("memory" if store == "memory" else f"oxigraph:{tmp_path / 'ox'}")
        graph_store = open_store(config, data)
        stack.callback(graph_store.close)
        for serial in range(3):
            after = _changes(data, rng, serial)
            changed = set(data.incidents) ^ set(after.incidents) | {
                i for i in data.incidents if i in after.incidents and data.incidents[i] != after.incidents[i]}
            assert follow_change(graph_store, data, after, changed) == "patched"
            assert graph_store.stored_hash() == graph_content_hash(after)
            assert _triples(graph_store) == _built(after)
            data = after
        # a store holding other content is not patched but reloaded whole
        stale = _changes(data, rng, 99)
        assert follow_change(graph_store, stale, _changes(stale, rng, 98), {"IL-0025"}) == "loaded"


def test_a_patch_applies_only_to_the_content_it_was_made_for(tmp_path: Path, data_dir: Path) -> None:
    """The compare-and-swap: a patch made for other content changes nothing (another replica got there first)."""
    data = load_library(_small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0133", "IL-0001"]))
    store = OxigraphStore(GraphStoreConfig(kind=StoreKind.oxigraph, location=str(tmp_path / "ox")))
    ensure_loaded(store, data)
    before = _triples(store)
    after = _changes(data, random.Random(7), 1)
    delta = graph_delta(data, after, set(data.incidents) | set(after.incidents))
    assert len(delta) > 0
    assert store.patch(delta, "not-the-stored-hash", graph_content_hash(after)) is False
    assert _triples(store) == before and store.stored_hash() == graph_content_hash(data)
    assert store.patch(delta, graph_content_hash(data), graph_content_hash(after)) is True
    assert _triples(store) == _built(after)
    store.close()


def test_a_write_patches_the_in_process_graph_in_place(tmp_path: Path, data_dir: Path) -> None:
    """Library writes reach SPARQL through a patch of the same rdflib graph (not a rebuild), and the export agrees."""
    library = Library.open(_small(tmp_path, data_dir, ["IL-0025", "IL-0021", "IL-0126", "IL-0001", "IL-0002", "IL-0070"]))
    assert library.sparql('ASK { ?i dcterms:identifier "IL-0025" }').boolean is True
    graph = library._graph_store.graph  # type: ignore[attr-defined]
    draft = library.create_draft({"title": {"en": "Patched draft about NCCL"}, "org": "meta", "date": "2024-05",
                                  "summary": {"en": "A draft filed while the incident ran."},
                                  "body": {"en": "Ranks stopped in an all-reduce."},
                                  "sources": [{"url": "https://example.com/patched", "title": "Notes"}]})
    assert library.sparql(f'ASK {{ ?i dcterms:identifier "{draft.id}" ; il:status "draft" }}').boolean is True
    linked = {link.id for incident in library.incidents() for link in incident.related}
    gone = next(i.id for i in library.incidents() if i.id not in linked and not i.is_draft)
    library.delete(gone)
    assert library.sparql(f'ASK {{ ?i dcterms:identifier "{gone}" }}').boolean is False
    assert library._graph_store.graph is graph  # type: ignore[attr-defined]  # patched, not rebuilt
    assert set(graph) == set(build_graph(library.data))
    exported = library.export("nt")
    assert draft.id in exported and f"/incident/{gone}>" not in exported
