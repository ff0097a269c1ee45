"""The NetworkX projection: the graph NetworkX's own ``add_edge`` would give, with shared read-only edge attributes."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from incidentlib.graph.projection import _select, build_projection, projection_from_store
from incidentlib.graph.store import GraphStoreConfig, StoreKind, open_store
from incidentlib.loader import LibraryData, load_library
from incidentlib.models import ConceptKind, InferenceMethod, InferredLink
from incidentlib.tagging.store import write_inferred
from tests.conftest import small_library

IDS = ["IL-0001", "IL-0002", "IL-0003", "IL-0025", "IL-0101", "IL-0126"]


def _inferred(concept: str, kind: ConceptKind, confidence: float) -> InferredLink:
    return InferredLink(concept=concept, kind=kind, evidence=f"words about {concept}", method=InferenceMethod.classifier,
                        confidence=confidence)


@pytest.fixture()
def with_inferred(tmp_path: Path, data_dir: Path) -> LibraryData:
    """Six bundled incidents, three of them with proposed inferred links (two of those alike in kind and confidence)."""
    root = small_library(tmp_path / "lib", data_dir, IDS)
    write_inferred(root / "incidents" / "IL-0001.yaml", [_inferred("nvlink", ConceptKind.component, 0.72),
                                                         _inferred("firmware-bug", ConceptKind.cause, 0.61)])
    write_inferred(root / "incidents" / "IL-0002.yaml", [_inferred("nvlink", ConceptKind.component, 0.72)])
    write_inferred(root / "incidents" / "IL-0025.yaml", [_inferred("ecc-errors", ConceptKind.symptom, 0.55)])
    return load_library(root)


def _by_add_edge(data: LibraryData) -> nx.Graph:
    """The projection's rule, written here with NetworkX's own calls: nodes, then each incident's edges in list order."""
    graph = nx.Graph()
    for concept in data.vocab:
        graph.add_node(f"{concept.kind.value}:{concept.id}", type=concept.kind.value, key=concept.id)
    for concept in data.vocab:
        parent = data.vocab.get(concept.broader) if concept.broader else None
        if parent is not None:
            graph.add_edge(f"{concept.kind.value}:{concept.id}", f"{parent.kind.value}:{parent.id}", type="broader")
    related = []
    for incident in data.incidents.values():
        node = f"incident:{incident.id}"
        graph.add_node(node, type="incident", key=incident.id, **({"year": incident.year} if incident.year is not None else {}))
        graph.add_edge(node, f"organization:{incident.org}", type="organization")
        for field, kind, edge in (("components", "component", "has_component"), ("causes", "cause", "has_cause"),
                                  ("symptoms", "symptom", "has_symptom"), ("tags", "tag", "has_tag")):
            for concept in getattr(incident, field):
                graph.add_edge(node, f"{kind}:{concept}", type=edge)
        for link in incident.proposed():
            graph.add_edge(node, f"{link.kind.value}:{link.concept}", type=f"inferred_{link.kind.value}", inferred=True,
                           confidence=link.confidence)
        related.extend((node, f"incident:{link.id}") for link in incident.related)
    graph.add_edges_from(related, type="curated")
    return graph


def _listed(graph: nx.Graph) -> tuple[list[object], list[object]]:
    return list(graph.nodes(data=True)), [(a, b, dict(attributes)) for a, b, attributes in graph.edges(data=True)]


@pytest.mark.parametrize("store", ["files", "memory", "oxigraph"])
def test_projection_equals_networkx_add_edge_and_shares_edge_attributes(with_inferred: LibraryData, tmp_path: Path,
                                                                        store: str) -> None:
    data = with_inferred
    if store == "files":
        graph = build_projection(data)
    else:
        config = GraphStoreConfig(kind=StoreKind(store), location=str(tmp_path / "ox") if store == "oxigraph" else None)
        graph = projection_from_store(open_store(config, data), data)
    expected = _by_add_edge(data)
    assert _listed(graph) == _listed(expected)  # nodes, edges, attributes and their order
    inferred = [(a, b) for a, b, attributes in graph.edges(data=True) if attributes.get("inferred")]
    assert len(inferred) == 4

    # one mapping per edge type, and per (kind, confidence) of an inferred link
    shared = {id(attributes) for _, _, attributes in graph.edges(data=True)}
    kinds = {(attributes["type"], attributes.get("confidence")) for _, _, attributes in graph.edges(data=True)}
    assert len(shared) == len(kinds) < graph.number_of_edges() // 10
    assert graph.edges["incident:IL-0001", "component:nvlink"] is graph.edges["incident:IL-0002", "component:nvlink"]

    # the projection cannot be changed edge by edge, and a copy of part of it can
    a, b = next(iter(graph.edges()))
    with pytest.raises(TypeError):
        graph.edges[a, b]["type"] = "changed"
    nearby = nx.ego_graph(graph, "incident:IL-0025", radius=1)
    some = next(iter(nearby.edges()))
    nearby.edges[some]["weight"] = 2.0
    assert "weight" not in graph.edges[some]
    assert graph.edges[some]["type"] == nearby.edges[some]["type"]


def test_select_rows_follow_the_query_text_and_share_their_values(with_inferred: LibraryData) -> None:
    store = open_store(GraphStoreConfig(), with_inferred)
    rows = _select(store, """SELECT ?concept ?id ?date WHERE { ?i a il:Incident ; dcterms:identifier ?id ;
        il:hasComponent ?c . ?c skos:notation ?concept . OPTIONAL { ?i il:noSuchProperty ?date } }""")
    assert len(rows) > len(IDS)
    assert all(len(row) == 3 and row[2] is None for row in rows)  # an unbound variable is None
    assert {row[1] for row in rows} <= set(IDS)  # the id is the second value, as the query selects it
    assert {row[0] for row in rows} <= {c.id for c in with_inferred.vocab}
    same = [row[1] for row in rows if row[1] == "IL-0025"]
    assert len(same) > 1 and all(value is same[0] for value in same)  # one string for every row of IL-0025
