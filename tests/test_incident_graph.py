"""The graph clusters' incident graph: the sparse product, merged concept sets and the nearest-neighbour graph."""

from __future__ import annotations

import itertools
import math
import random

import networkx as nx
import pytest
from fastapi.testclient import TestClient

from incidentlib.analysis import clusters, incident_graph
from incidentlib.analysis.clusters import ClusterRow, graph_clusters
from incidentlib.analysis.incident_graph import FIELD_WEIGHT, Weights, build
from incidentlib.api import ServiceSettings, create_app
from incidentlib.errors import ClusterLimitError, InvalidRequest


def _collection(size: int, seed: int) -> list[tuple[str, Weights]]:
    """Incidents over a small vocabulary, some with the same concepts, one with none, inferred confidences mixed in."""
    rng = random.Random(seed)
    vocabulary = [(field, f"{field[:3]}-{n}") for field in FIELD_WEIGHT for n in range(6)]
    incidents: list[tuple[str, Weights]] = []
    for n in range(size):
        if n % 5 == 4:  # a copy of an earlier incident's concepts
            incidents.append((f"I-{n:03d}", dict(incidents[rng.randrange(len(incidents))][1])))
            continue
        chosen = rng.sample(vocabulary, rng.randint(0, 4)) if n else []
        incidents.append((f"I-{n:03d}", {key: rng.choice([1.0, 0.6, 0.85]) for key in chosen}))
    return incidents


def _by_formula(incidents: list[tuple[str, Weights]]) -> dict[frozenset[str], float]:
    """``A_ab = Σ_k W_k x_a(k) x_b(k)``, ``W_k = FIELD_WEIGHT · ln(1 + N / df_k)``, pair by pair."""
    holders: dict[tuple[str, str], int] = {}
    for _, weights in incidents:
        for key in weights:
            holders[key] = holders.get(key, 0) + 1
    links = {}
    for (a, wa), (b, wb) in itertools.combinations(incidents, 2):
        value = sum(FIELD_WEIGHT[key[0]] * math.log(1 + len(incidents) / holders[key]) * wa[key] * wb[key]
                    for key in wa.keys() & wb.keys())
        if value > 0:
            links[frozenset((a, b))] = value
    return links


def test_small_graph_links_every_pair_by_the_formula() -> None:
    incidents = _collection(40, seed=1)
    built = build(incidents)
    assert built.exact and list(built.graph.nodes) == [i for i, _ in incidents]
    assert all(members == [node] for node, members in built.members.items())
    expected = _by_formula(incidents)
    assert {frozenset(edge) for edge in built.graph.edges} == set(expected)
    for edge, value in expected.items():
        a, b = tuple(edge)
        assert built.graph[a][b]["weight"] == pytest.approx(value, rel=1e-12)


def _full_graph(incidents: list[tuple[str, Weights]]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(i for i, _ in incidents)
    graph.add_weighted_edges_from((*sorted(edge), value) for edge, value in _by_formula(incidents).items())
    return graph


def test_merged_concept_sets_keep_the_modularity_of_the_incident_graph(monkeypatch) -> None:
    incidents = _collection(60, seed=2)
    monkeypatch.setattr(incident_graph, "EXACT_NODES", 55)  # merging starts past EXACT_NODES incidents
    built = build(incidents)
    assert built.exact and len(built.members) < len(incidents)
    assert sorted(m for members in built.members.values() for m in members) == sorted(i for i, _ in incidents)
    weights = dict(incidents)
    assert built.members["I-000"] == ["I-000"]  # no concepts: never merged with another incident
    for members in built.members.values():
        assert all(weights[m] == weights[members[0]] for m in members)
    assert nx.number_of_selfloops(built.graph) > 0
    full = _full_graph(incidents)
    rng = random.Random(3)
    nodes = list(built.members)
    for resolution in (1.0, 2.0):
        for _ in range(5):  # partitions that keep every merged node whole
            labels = {node: rng.randrange(4) for node in nodes}
            merged = [{n for n in nodes if labels[n] == c} for c in range(4)]
            expanded = [{m for n in part for m in built.members[n]} for part in merged]
            merged, expanded = [p for p in merged if p], [p for p in expanded if p]
            assert nx.community.modularity(built.graph, merged, resolution=resolution) == pytest.approx(
                nx.community.modularity(full, expanded, resolution=resolution), rel=1e-9)
    degrees = built.member_degrees(nodes)
    for node, members in built.members.items():  # a node's degree is its members'
        assert degrees[node] == pytest.approx(full.degree(members[0], weight="weight"), rel=1e-9, abs=1e-12)


def test_large_graph_keeps_each_nodes_nearest(monkeypatch) -> None:
    incidents = _collection(80, seed=4)
    monkeypatch.setattr(incident_graph, "EXACT_NODES", 10)
    monkeypatch.setattr(incident_graph, "NEIGHBOURS_KEPT", 3)
    built = build(incidents)
    assert not built.exact
    weights = dict(incidents)
    nodes = list(built.members)
    full = _by_formula([(n, weights[n]) for n in nodes])  # one member each: s_gh
    holders: dict[tuple[str, str], int] = {}
    for _, w in incidents:
        for key in w:
            holders[key] = holders.get(key, 0) + 1

    def similarity(a: str, b: str) -> float:  # with the df of every incident, not of one member per node
        return sum(FIELD_WEIGHT[k[0]] * math.log(1 + len(incidents) / holders[k]) * weights[a][k] * weights[b][k]
                   for k in weights[a].keys() & weights[b].keys())

    kept = {frozenset(e) for e in built.graph.edges if e[0] != e[1]}
    assert kept <= set(full)  # only nodes that share a concept are linked
    for a in nodes:
        others = sorted((similarity(a, b) for b in nodes if b != a), reverse=True)
        linked = sorted((similarity(a, b) for b in nodes if frozenset((a, b)) in kept), reverse=True)
        third = others[2] if len(others) > 2 else 0.0
        # every node keeps at least its 3 most similar (fewer when fewer share a concept), and any other link
        # it has is one chosen by the other side
        assert sum(1 for s in linked if s >= third - 1e-5) >= min(3, sum(1 for s in others if s > 0))
    for a, b, value in built.graph.edges(data="weight"):
        size_a, size_b = len(built.members[a]), len(built.members[b])
        expected = size_a * (size_a - 1) / 2 * similarity(a, a) if a == b else size_a * size_b * similarity(a, b)
        assert value == pytest.approx(expected, rel=1e-5)


def _row(incident_id: str, weights: Weights) -> ClusterRow:
    return ClusterRow(id=incident_id, published=True, clustered=True, weights=weights, concepts=(), causes=(), title_terms=frozenset(),
                      summaries={})


@pytest.mark.parametrize("exact_nodes", [1_000, 1])
def test_planted_causes_are_found_on_either_graph(monkeypatch, exact_nodes) -> None:
    """Three causes, each with its own component, a symptom every incident shows; copies merge past EXACT_NODES."""
    monkeypatch.setattr(incident_graph, "EXACT_NODES", exact_nodes)
    monkeypatch.setattr(incident_graph, "NEIGHBOURS_KEPT", 4)
    rng = random.Random(5)
    rows, planted = [], {}
    for n in range(90):
        group = n % 3
        weights = {("causes", f"cause-{group}"): 1.0, ("components", f"part-{group}"): rng.choice([1.0, 0.7]),
                   ("symptoms", "hang"): 1.0}
        if rng.random() < 0.3:
            weights[("components", f"part-{(group + 1) % 3}")] = 0.55  # a weak link across groups
        rows.append(_row(f"I-{n:03d}", weights))
        planted[rows[-1].id] = group
    found = graph_clusters(rows, resolution=1.0)
    assert sorted(len(c.members) for c in found) == [30, 30, 30]
    for cluster in found:
        assert len({planted[m] for m in cluster.members}) == 1
        assert cluster.representative in cluster.members


def test_representative_is_a_member_of_the_best_connected_node(monkeypatch) -> None:
    monkeypatch.setattr(incident_graph, "EXACT_NODES", 1)
    shared = {("causes", "c"): 1.0, ("components", "x"): 1.0}
    rows = [_row("I-3", {("causes", "c"): 1.0}), _row("I-2", shared), _row("I-1", shared), _row("I-4", {("components", "x"): 1.0})]
    [cluster] = graph_clusters(rows)
    assert cluster.members == ["I-1", "I-2", "I-3", "I-4"]
    assert cluster.representative == "I-1"  # I-1 and I-2 tie as the best connected: the lower id


def test_embedding_method_refuses_past_its_limit(monkeypatch, search_library) -> None:
    monkeypatch.setattr(clusters, "EMBEDDING_LIMIT", 10)
    fresh = type(search_library).open(search_library.root, search_library.search_config)
    with pytest.raises(ClusterLimitError, match="at most 10 incidents") as raised:
        fresh.clusters("embedding")
    assert isinstance(raised.value, InvalidRequest) and raised.value.parameter == "method"
    assert fresh.clusters("graph").clusters  # the graph method has no such bound
    with TestClient(create_app(fresh, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as client:
        answer = client.get("/clusters", params={"method": "embedding"})
        assert answer.status_code == 422
        assert "at most 10 incidents" in answer.text and "method" in answer.text


def test_cluster_listings_can_cap_their_members(search_library) -> None:
    full = search_library.clusters("graph")
    capped = search_library.clusters("graph", members=2)
    assert [c.size for c in capped.clusters] == [c.size for c in full.clusters]  # sizes still count every member
    for whole, cut in zip(full.clusters, capped.clusters, strict=True):
        assert [m.id for m in cut.members] == [m.id for m in whole.members[:2]]
    assert search_library.clusters("graph").model_dump() == full.model_dump()  # the cached clusters were not cut
    with pytest.raises(InvalidRequest, match="members cannot be negative"):
        search_library.clusters("graph", members=-1)
    with TestClient(create_app(search_library, ServiceSettings(mount_mcp=False)), base_url="http://127.0.0.1:8000") as client:
        body = client.get("/clusters", params={"members": 1}).json()
        assert all(len(c["members"]) == 1 for c in body["clusters"]) and body["clusters"][0]["size"] > 1
        assert client.get("/clusters", params={"members": -1}).status_code == 422
