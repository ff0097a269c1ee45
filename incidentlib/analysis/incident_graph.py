"""The incident graph of the graph clusters, made without visiting every pair of incidents.

Two incidents ``a`` and ``b`` are linked with weight ``A_ab = Σ_k W_k x_a(k) x_b(k)``: ``k`` runs over the
(field, concept) pairs, ``x(k)`` is 1 for a curated link and the confidence of an inferred one, and
``W_k = FIELD_WEIGHT[field] · ln(1 + N / df_k)`` over the ``N`` incidents taking part.  In matrix form
``A = (X W) Xᵀ`` off the diagonal, a sparse product, where the loop over every pair holding a concept was
quadratic in the concept's holders (tens of thousands of them for a common symptom at 100k incidents).

**Signatures.** Incidents with the same weighted concepts are linked to every other incident alike, so they are one
node ``g`` of ``n_g`` members, its links the sums of theirs: ``A_gh = n_g n_h s_gh`` and a self-loop
``A_gg = n_g (n_g − 1) / 2 · s_gg`` for the links among them (``s`` is ``A`` between one member of each).  A node's
degree is then the sum of its members' degrees and a community's internal weight the sum of its members' links, so the
modularity of a partition that keeps each node whole is the same as on the incident graph: Louvain optimises the same
objective, its members simply never split.  An incident with no concepts links to nothing and stays a node of its own.
Merging is done past :data:`EXACT_NODES` incidents only: it changes the path Louvain's greedy moves take (not what
they optimise), and a small library keeps the one-node-per-incident graph its clusters were measured on
(docs/clusters.md).

**Large graphs.** Up to :data:`EXACT_NODES` nodes every link is kept.  Past that the links (up to ``G²``) do not fit
in memory, and each node keeps the :data:`NEIGHBOURS_KEPT` nodes most similar to it by ``s_gh`` (its self-loop too),
the union of both sides' choices: the k-nearest-neighbour graph that graph clustering of large collections runs
Louvain on.  The neighbours are found by FAISS's exact inner-product search over the concepts held by two nodes or
more (a concept only one node holds links nothing): the products in blocks and a heap per node, so memory stays
``G × concepts``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

# Symptoms count half: many unrelated root causes show the same symptom (a hang, a 5xx), so a shared
# symptom says less about a common cause than a shared component or cause.  Chosen by hand; not tuned.
FIELD_WEIGHT = {"components": 1.0, "causes": 1.0, "symptoms": 0.5}
#: Nodes (distinct signatures) up to which every link is kept: 1,000 nodes are at most half a million links, which
#: networkx holds in about 0.3 GB and Louvain visits in seconds (3,000 nodes: 2.5M links, 1.4 GB, 30 s of Louvain,
#: bench/bench_clusters_graph.py).
EXACT_NODES = 1_000
#: Neighbours each node keeps past EXACT_NODES: 15 is the usual size of the k-nearest-neighbour graphs that large
#: collections are clustered on (scanpy's default), not tuned here.
NEIGHBOURS_KEPT = 15

#: (field, concept id) -> weight: 1 for a curated link, the confidence of an inferred one.
Weights = dict[tuple[str, str], float]


@dataclass(frozen=True)
class IncidentGraph:
    """The graph Louvain runs on: nodes named by their first member's id, and each node's members."""

    graph: nx.Graph
    members: dict[str, list[str]]
    exact: bool

    def member_degrees(self, within: Collection[str]) -> dict[str, float]:
        """Each node's per-member weighted degree among the nodes ``within`` (a node's degree is its members' sum)."""
        degrees = self.graph.subgraph(within).degree(weight="weight")
        return {node: float(degree) / len(self.members[node]) for node, degree in degrees}


def build(incidents: Sequence[tuple[str, Weights]]) -> IncidentGraph:
    """The incident graph of ``incidents`` (id, weighted concepts) in their order (see the module docstring)."""
    columns: dict[tuple[str, str], int] = {}
    holders: list[int] = []
    for _, weights in incidents:
        for key in weights:
            column = columns.setdefault(key, len(columns))
            if column == len(holders):
                holders.append(0)
            holders[column] += 1
    total = len(incidents)
    column_weight = np.array([FIELD_WEIGHT[field] * math.log(1 + total / holders[c]) for (field, _), c in columns.items()])

    # one node per signature past EXACT_NODES incidents (below, one per incident: see the module docstring); an
    # incident without concepts is a node of its own
    merge = total > EXACT_NODES
    node_of: dict[tuple[tuple[str, str, float], ...], str] = {}
    members: dict[str, list[str]] = {}
    rows: list[dict[tuple[str, str], float]] = []
    for incident_id, weights in incidents:
        signature = tuple(sorted((field, concept, value) for (field, concept), value in weights.items())) if merge else ()
        node = node_of.setdefault(signature, incident_id) if signature else incident_id
        if node == incident_id:
            members[node] = []
            rows.append(weights)
        members[node].append(incident_id)
    nodes = list(members)
    sizes = np.array([len(members[n]) for n in nodes], dtype=np.float64)

    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    if len(nodes) <= EXACT_NODES:
        _link_all(graph, nodes, sizes, *_matrix(rows, columns, column_weight, len(nodes)))
        return IncidentGraph(graph, members, exact=True)
    _link_nearest(graph, nodes, sizes, *_matrix(rows, columns, column_weight, len(nodes)))
    return IncidentGraph(graph, members, exact=False)


def _matrix(rows: list[Weights], columns: dict[tuple[str, str], int], column_weight: np.ndarray,
            height: int) -> tuple[Any, Any]:
    """``X W`` and ``X`` as CSR matrices, nodes by columns, columns in order of first appearance."""
    from scipy import sparse  # type: ignore[import-untyped]

    indptr = np.zeros(height + 1, dtype=np.int64)
    indices: list[int] = []
    values: list[float] = []
    for row, weights in enumerate(rows):
        found = sorted((columns[key], value) for key, value in weights.items())
        indices.extend(c for c, _ in found)
        values.extend(v for _, v in found)
        indptr[row + 1] = len(indices)
    index = np.asarray(indices, dtype=np.int64)
    value = np.asarray(values, dtype=np.float64)
    shape = (height, len(column_weight))
    return (sparse.csr_matrix((value * column_weight[index] if len(index) else value, index, indptr), shape=shape),
            sparse.csr_matrix((value, index, indptr), shape=shape))


def _link_all(graph: nx.Graph, nodes: list[str], sizes: np.ndarray, weighted: Any, plain: Any) -> None:
    # the sum over shared concepts runs in column order, as the pairwise loop it replaces added them
    similarity = (weighted @ plain.T).tocoo()
    keep = similarity.row <= similarity.col
    rows, cols, values = similarity.row[keep], similarity.col[keep], similarity.data[keep]
    for a, b, s in zip(rows.tolist(), cols.tolist(), values.tolist(), strict=True):
        if a != b:
            graph.add_edge(nodes[a], nodes[b], weight=sizes[a] * sizes[b] * s)
        else:
            _link_members(graph, nodes[a], sizes[a], s)


def _link_members(graph: nx.Graph, node: str, size: float, similarity: float) -> None:
    """The self-loop of a node of ``size`` members: the ``size (size − 1) / 2`` links among them (none for one)."""
    if size > 1:
        graph.add_edge(node, node, weight=size * (size - 1) / 2 * similarity)


def _link_nearest(graph: nx.Graph, nodes: list[str], sizes: np.ndarray, weighted: Any, plain: Any) -> None:
    self_links = np.asarray(weighted.multiply(plain).sum(axis=1)).ravel()
    for a in np.flatnonzero(sizes > 1).tolist():
        _link_members(graph, nodes[a], sizes[a], self_links[a])
    # a concept held by one node links nothing; dropping its column shrinks every product
    shared = np.flatnonzero(plain.getnnz(axis=0) > 1)
    queries = np.ascontiguousarray(weighted[:, shared].astype(np.float32).toarray())
    kept = min(NEIGHBOURS_KEPT, len(nodes) - 1)
    found_similarity, found = _nearest(queries, plain[:, shared].astype(np.float32).toarray(), kept + 1)
    for a, (row, values) in enumerate(zip(found.tolist(), found_similarity.tolist(), strict=True)):
        # the node itself may be among its own best (or not: another node's confidences may be higher), never kept
        for b, s in [(b, s) for b, s in zip(row, values, strict=True) if b != a][:kept]:
            if s > 0.0 and not graph.has_edge(nodes[a], nodes[b]):
                graph.add_edge(nodes[a], nodes[b], weight=float(sizes[a] * sizes[b]) * s)


def _nearest(queries: np.ndarray, rows: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` rows of largest inner product with each query (values, row numbers): FAISS's exact search
    multiplies in blocks and keeps a heap per query, where a sort per query of every product was most of the time."""
    import faiss

    index = faiss.IndexFlatIP(rows.shape[1])
    index.add(np.ascontiguousarray(rows))
    return index.search(queries, count)
