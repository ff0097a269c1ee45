"""The graph projection after a live write is patched from the one before (incidentlib.graph.projection_patch): the
nodes, edges and attributes a build from every record gives, the projection before left as it was, and no build;
related's concept document frequencies are patched along."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib import Library
from incidentlib.graph import projection as projection_module
from incidentlib.graph import scoring
from incidentlib.graph.projection import build_projection
from incidentlib.graph.projection_patch import patched_projection
from incidentlib.loader import load_library

IDS = ["IL-0001", "IL-0002", "IL-0003", "IL-0025", "IL-0070"]


def shape(graph: Any) -> tuple[dict[str, dict[str, Any]], dict[frozenset[str], dict[str, Any]]]:
    """Every node with its attributes and every edge (either way round) with its attributes."""
    nodes = {node: dict(attributes) for node, attributes in graph.nodes(data=True)}
    edges = {frozenset((u, v)): dict(attributes) for u, v, attributes in graph.edges(data=True)}
    return nodes, edges


def draft(word: str, **fields: object) -> dict[str, object]:
    return {"org": "meta", "title": {"en": f"Checkpoint stalls ({word})"},
            "summary": {"en": "Training jobs stalled while writing checkpoints."},
            "body": {"en": f"The {word} storage tier stopped answering."},
            "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}], **fields}


def test_every_kind_of_write_patches_the_projection_as_a_build_would(tmp_path: Path, data_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = small_library(tmp_path / "lib", data_dir, IDS)
    library = Library(load_library(root), embedder=HashEmbedder())
    before = library._knowledge.nx  # built once, from every record
    assert library.related("IL-0025")  # and related's concept document frequencies with it
    count_all = scoring.document_frequency

    def no_build(*_: object) -> None:
        raise AssertionError("the projection or its document frequencies were made from scratch again")

    monkeypatch.setattr(projection_module, "build_projection", no_build)
    monkeypatch.setattr(scoring, "document_frequency", no_build)
    inferred = [{"concept": "hbm", "kind": "component", "evidence": "memory", "method": "alias", "confidence": 0.9},
                {"concept": "gpu", "kind": "component", "evidence": "x", "method": "alias", "confidence": 0.6}]
    made: dict[str, str] = {}

    def create(name: str, **fields: object) -> Callable[[], object]:
        def step() -> object:
            made[name] = library.create_draft(draft(name, **fields)).id
            return made[name]
        return step

    steps: list[Callable[[], object]] = [
        create("first", components=["nccl"], causes=[], inferred=inferred),
        lambda: library.review_concept(made["first"], "hbm", accept=True),
        lambda: library.review_concept(made["first"], "gpu", accept=False),
        lambda: library.add_link(made["first"], "IL-0002", {"en": "same storage tier"}),
        lambda: library.add_link("IL-0001", made["first"], {"en": "same fabric"}),
        lambda: library.update_incident(made["first"], {"date": "2024-05", "components": ["gpu"], "org": "openai"},
                                        library.record(made["first"]).etag),
        create("second"),
        lambda: library.reject(made["second"]),
        lambda: library.remove_link("IL-0001", made["first"]),
        lambda: library.remove_link(made["first"], "IL-0002"),
        lambda: library.delete("IL-0003"),
        lambda: library.restore("IL-0003"),
    ]
    graphs = [before]
    for step in steps:
        previous_graph, previous_shape = graphs[-1], shape(graphs[-1])
        step()
        graph = library._knowledge.nx
        assert graph is not previous_graph
        assert shape(graph) == shape(build_projection(library.data))
        assert library._knowledge.__dict__["document_frequency"] == count_all(graph)  # patched with the projection
        assert shape(previous_graph) == previous_shape  # the projection a request may still read is untouched
        graphs.append(graph)
    first = f"incident:{made['first']}"
    assert graphs[6].nodes[first]["year"] == 2024 and graphs[6].has_edge(first, "organization:openai")
    assert graphs[5].edges[first, "incident:IL-0001"]["type"] == "curated"
    assert graphs[1].edges[first, "component:gpu"]["inferred"] and graphs[2].edges[first, "component:hbm"]["type"] == "has_component"
    assert "incident:IL-0003" not in graphs[11] and "incident:IL-0003" in graphs[12]
    assert f"incident:{made['second']}" in graphs[7] and f"incident:{made['second']}" not in graphs[8]
    assert library.related(made["first"])  # the graph queries run on the patched projection


def test_an_organisation_left_without_incidents_is_dropped_and_a_vocabulary_change_refused(tmp_path: Path,
                                                                                          data_dir: Path) -> None:
    """A node only links make (outside the vocabulary) goes when its last link does; a patch across a change of
    the vocabulary is refused."""
    root = small_library(tmp_path / "lib", data_dir, IDS)
    data = load_library(root)
    graph = build_projection(data)
    one = data.incidents["IL-0001"]
    odd = one.model_copy(update={"org": "no-such-org", "components": [*one.components, "not-in-vocabulary"]})
    from dataclasses import replace

    from incidentlib.overlaid import OverlaidRecords

    odd_data = replace(data, incidents=OverlaidRecords(data.incidents, {"IL-0001": odd}))
    odd_graph = patched_projection(graph, data, odd_data, {"IL-0001"})
    assert shape(odd_graph) == shape(build_projection(odd_data))
    assert "organization:no-such-org" in odd_graph and "component:not-in-vocabulary" in odd_graph
    back = patched_projection(odd_graph, odd_data, data, {"IL-0001"})
    assert shape(back) == shape(graph)
    assert "organization:no-such-org" not in back and "component:not-in-vocabulary" not in back
    other_vocabulary = replace(data, vocab=type(data.vocab)(list(data.vocab)[1:]))
    with pytest.raises(ValueError, match="vocabulary changed"):
        patched_projection(graph, data, other_vocabulary, {"IL-0001"})


def test_over_a_persistent_store_the_patch_equals_the_projection_read_from_the_store(tmp_path: Path, data_dir: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With the graph in an embedded Oxigraph store, a write patches the projection too (no five SELECTs), and the
    result equals the projection read from the store, which the write patched with its own triples."""
    from incidentlib.graph.store import parse_graph_store

    root = small_library(tmp_path / "lib", data_dir, IDS)
    library = Library(load_library(root), embedder=HashEmbedder(), graph_store=parse_graph_store(f"oxigraph:{tmp_path / 'ox'}"))
    before = library._knowledge.nx
    read_from_store = projection_module.projection_from_store

    def no_read(*_: object) -> None:
        raise AssertionError("the projection was read from the store again")

    monkeypatch.setattr(projection_module, "projection_from_store", no_read)
    record = library.create_draft(draft("third", components=["nccl"]))
    library.add_link(record.id, "IL-0025", {"en": "same collective"})
    library.delete("IL-0003")
    graph = library._knowledge.nx
    assert graph is not before and f"incident:{record.id}" in graph and "incident:IL-0003" not in graph
    assert shape(graph) == shape(read_from_store(library._graph_store, library.data)) == shape(build_projection(library.data))
