"""Root-cause clusters, from the knowledge graph or from embeddings.

``graph``: incidents are linked when they share components, causes or symptoms, with
weight ``Σ w(c)`` (``w(c) = ln(1 + N/df(c))``, symptoms counting half); Louvain
community detection (seed 42) splits that graph.

``embedding``: each incident is the normalised mean of its title and body chunk
vectors; average-linkage agglomerative clustering on cosine distance, with as many
clusters as the graph method found, so the two compare at the same granularity.

Each cluster gets a bilingual label from its defining concepts (frequent in the
cluster and rare outside it: ``count × ln(lift)``), a few distinctive title terms,
its size and a representative (the member most connected to the others).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum

import networkx as nx
import numpy as np

from ..graph.knowledge import KnowledgeGraph
from ..models import Incident
from ..search.tokenize import tokenize
from ..views import ClusterQuality, ClusterSet, ClusterView, ConceptCount

SEED = 42
CONCEPT_FIELDS = ("components", "causes", "symptoms")
FIELD_WEIGHT = {"components": 1.0, "causes": 1.0, "symptoms": 0.5}


class ClusterMethod(str, Enum):
    graph = "graph"
    embedding = "embedding"


@dataclass(frozen=True)
class RawCluster:
    members: list[str]
    representative: str


def _concepts(incident: Incident) -> list[tuple[str, str]]:
    return [(field, concept_id) for field in CONCEPT_FIELDS for concept_id in getattr(incident, field)]


def incident_graph(knowledge: KnowledgeGraph) -> nx.Graph:
    """Incidents linked by shared components, causes and symptoms, weighted by rarity."""
    incidents = [i for i in knowledge.data.incidents.values() if not i.is_draft]
    holders: dict[tuple[str, str], list[str]] = {}
    for incident in incidents:
        for key in _concepts(incident):
            holders.setdefault(key, []).append(incident.id)
    total = len(incidents)
    graph = nx.Graph()
    graph.add_nodes_from(i.id for i in incidents)
    for (field, _), ids in holders.items():
        weight = FIELD_WEIGHT[field] * math.log(1 + total / len(ids))
        for a_index, a in enumerate(ids):
            for b in ids[a_index + 1 :]:
                previous = graph.get_edge_data(a, b, {"weight": 0.0})["weight"]
                graph.add_edge(a, b, weight=previous + weight)
    return graph


def graph_clusters(knowledge: KnowledgeGraph, resolution: float = 1.0) -> list[RawCluster]:
    graph = incident_graph(knowledge)
    communities = nx.community.louvain_communities(graph, weight="weight", seed=SEED, resolution=resolution)
    clusters = []
    for community in communities:
        members = sorted(community)
        sub = graph.subgraph(members)
        representative = max(members, key=lambda m: sub.degree(m, weight="weight"))  # first (lowest id) on ties
        clusters.append(RawCluster(members, representative))
    return _ordered(clusters)


def embedding_clusters(ids: list[str], vectors: np.ndarray, n_clusters: int) -> list[RawCluster]:
    from sklearn.cluster import AgglomerativeClustering

    n_clusters = max(1, min(n_clusters, len(ids)))
    if n_clusters == 1:
        labels = np.zeros(len(ids), dtype=int)
    else:
        labels = AgglomerativeClustering(n_clusters=n_clusters, metric="cosine", linkage="average").fit_predict(vectors)
    clusters = []
    for label in sorted(set(labels.tolist())):
        rows = np.flatnonzero(labels == label)
        centroid = vectors[rows].mean(axis=0)
        best = rows[int(np.argmax(vectors[rows] @ centroid))]
        clusters.append(RawCluster(sorted(ids[r] for r in rows), ids[best]))
    return _ordered(clusters)


def _ordered(clusters: list[RawCluster]) -> list[RawCluster]:
    return sorted(clusters, key=lambda c: (-len(c.members), c.representative))


def quality(knowledge: KnowledgeGraph, clusters: list[RawCluster]) -> ClusterQuality:
    """Purity (a member is pure when it carries the cluster's most common cause) and NMI on first-listed causes."""
    from sklearn.metrics import normalized_mutual_info_score

    incidents = knowledge.data.incidents
    total = sum(len(c.members) for c in clusters)
    pure = 0
    truth, predicted = [], []
    for index, cluster in enumerate(clusters):
        counts = Counter(cause for m in cluster.members for cause in incidents[m].causes)
        if counts:
            top = counts.most_common(1)[0][0]
            pure += sum(1 for m in cluster.members if top in incidents[m].causes)
        for member in cluster.members:
            causes = incidents[member].causes
            truth.append(causes[0] if causes else "none")
            predicted.append(index)
    return ClusterQuality(
        purity=round(pure / total, 4) if total else 0.0,
        nmi=round(float(normalized_mutual_info_score(truth, predicted)), 4) if total else 0.0,
        clusters=len(clusters),
        singletons=sum(1 for c in clusters if len(c.members) == 1),
    )


def describe(knowledge: KnowledgeGraph, clusters: list[RawCluster], method: ClusterMethod, lang: str) -> ClusterSet:
    incidents = knowledge.data.incidents
    vocab = knowledge.data.vocab
    total = len(incidents)
    df = Counter(cid for i in incidents.values() for _, cid in _concepts(i))
    title_df = Counter(t for i in incidents.values() for t in set(tokenize(i.title.get("en"))))
    prefix = "g" if method is ClusterMethod.graph else "e"
    views = []
    for number, cluster in enumerate(clusters, 1):
        size = len(cluster.members)
        counts = Counter(cid for m in cluster.members for _, cid in _concepts(incidents[m]))
        scored = []
        for concept_id, count in counts.items():
            lift = (count / size) / (df[concept_id] / total)
            if count >= min(2, size) and lift > 1:
                scored.append((count * math.log(lift), count, concept_id))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
        defining = [
            ConceptCount(id=cid, kind=vocab.get(cid).kind.value, label=vocab.label(cid, lang), count=count)  # type: ignore[union-attr]
            for _, count, cid in scored[:5]
        ]
        top = [c.id for c in defining[:3]]
        labels = {code: " · ".join(vocab.label(cid, code) for cid in top) or incidents[cluster.representative].title.get(code)
                  for code in ("en", "ko")}
        terms_count = Counter(t for m in cluster.members for t in set(tokenize(incidents[m].title.get("en"))))
        terms = [t for t, _ in sorted(terms_count.items(), key=lambda kv: (-kv[1] * math.log(1 + total / title_df[kv[0]]), kv[0]))
                 if len(t) > 2 and not t.isdigit()][:5]
        views.append(ClusterView(
            id=f"{prefix}-{number:02d}", method=method.value, label=labels[lang], labels=labels, size=size,
            representative=cluster.representative, defining_concepts=defining, terms=terms,
            members=[knowledge.summary(incidents[m], lang) for m in cluster.members],
        ))
    return ClusterSet(method=method.value, quality=quality(knowledge, clusters), clusters=views)
