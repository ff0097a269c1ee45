"""Root-cause clusters, from the knowledge graph or from embeddings.

``graph``: incidents are linked when they share components, causes or symptoms, with
weight ``Σ w(c)`` (``w(c) = ln(1 + N/df(c))``, symptoms counting half); Louvain
community detection (seed 42) splits that graph.  The graph is made as a sparse product with
incidents of the same concepts as one node (:mod:`.incident_graph`), not pair by pair.

``embedding``: each incident is the normalised mean of its title and body chunk
vectors; average-linkage agglomerative clustering on cosine distance, with as many
clusters as the graph method found, so the two compare at the same granularity.  It holds
every pairwise distance, so it stops with a clear error past :data:`EMBEDDING_LIMIT` incidents.

Each cluster gets a bilingual label from its defining concepts (frequent in the
cluster and rare outside it: ``count × ln(lift)``), a few distinctive title terms,
its size and a representative (the member most connected to the others).

Every record is read once, into a :class:`ClusterRow` (what the methods and the descriptions read), and
not kept: at 100k incidents the rows are a few hundred megabytes where the records are gigabytes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import networkx as nx
import numpy as np

from ..errors import ClusterLimitError
from ..graph.refs import summary
from ..loader import LibraryData, each_record
from ..models import LANGS, Incident
from ..search.tokenize import tokenize_many
from ..views import ClusterQuality, ClusterSet, ClusterView, ConceptCount, IncidentSummary
from . import incident_graph
from .incident_graph import FIELD_WEIGHT, Weights

# Louvain is randomised; any fixed seed makes clusters reproducible.  42 is arbitrary, and the
# resolution sweep in docs/clusters.md was measured with it.
SEED = 42
CONCEPT_FIELDS = ("components", "causes", "symptoms")
# Cluster descriptions, sized for one readable line: defining concepts listed, how many of them make
# the label, distinctive title terms listed.  Chosen by hand; not tuned.
DEFINING_SHOWN = 5
LABEL_CONCEPTS = 3
TERMS_SHOWN = 5
# A concept defines a cluster only if at least this many members name it (fewer in a smaller cluster):
# one incident's concept is not a pattern.
MIN_DEFINING_COUNT = 2
# Title terms shorter than this ("s3", "ib") are left out of cluster descriptions; chosen by hand, not tuned.
MIN_TERM_CHARS = 3
#: Incidents past which the embedding method refuses: average linkage holds every pairwise distance, 8 bytes each
#: (20,000 incidents: 3.2 GB, and hours of merging on two cores); the graph method has no such bound.
EMBEDDING_LIMIT = 20_000

__all__ = ["FIELD_WEIGHT", "ClusterMethod", "ClusterRow", "RawCluster", "cluster_id", "describe", "embedding_clusters",
           "graph_clusters", "quality", "read_rows"]


class ClusterMethod(str, Enum):
    graph = "graph"
    embedding = "embedding"


@dataclass(frozen=True)
class RawCluster:
    members: list[str]
    representative: str


_KIND_FIELD = {"component": "components", "cause": "causes", "symptom": "symptoms"}


@dataclass(frozen=True, slots=True)
class ClusterRow:
    """What clustering and the cluster descriptions read of one incident."""

    id: str
    published: bool
    #: published, or a draft that carries inferred links (a team's own, untagged collection)
    clustered: bool
    #: curated links weigh 1, inferred (proposed) ones their confidence
    weights: Weights
    #: curated concept ids, components then causes then symptoms (the defining concepts and their counts)
    concepts: tuple[str, ...]
    causes: tuple[str, ...]
    title_terms: frozenset[str]
    summaries: Mapping[str, IncidentSummary]


def _weighted_concepts(incident: Incident) -> Weights:
    weights = {(field, concept_id): 1.0 for field in CONCEPT_FIELDS for concept_id in getattr(incident, field)}
    for link in incident.proposed():
        key = (_KIND_FIELD[link.kind.value], link.concept)
        weights[key] = max(weights.get(key, 0.0), link.confidence)
    return weights


def read_rows(data: LibraryData) -> list[ClusterRow]:
    """Every incident's :class:`ClusterRow`, in the library's order, from one pass that keeps no record (the titles
    are tokenized after it, together: the bulk path, :func:`tokenize_many`)."""
    read = [(incident.id, not incident.is_draft, not incident.is_draft or bool(incident.proposed()), _weighted_concepts(incident),
             tuple(concept_id for field in CONCEPT_FIELDS for concept_id in getattr(incident, field)),
             tuple(incident.causes), incident.title.get("en"), {lang: summary(data, incident, lang) for lang in LANGS})
            for incident in each_record(data.incidents)]
    terms = tokenize_many([title for *_, title, _ in read])
    return [ClusterRow(id=incident_id, published=published, clustered=clustered, weights=weights, concepts=concepts,
                       causes=causes, title_terms=frozenset(title_terms), summaries=summaries)
            for (incident_id, published, clustered, weights, concepts, causes, _, summaries), title_terms
            in zip(read, terms, strict=True)]


def graph_clusters(rows: Sequence[ClusterRow], resolution: float = 1.0) -> list[RawCluster]:
    built = incident_graph.build([(row.id, row.weights) for row in rows if row.clustered])
    communities = nx.community.louvain_communities(built.graph, weight="weight", seed=SEED, resolution=resolution)
    clusters = []
    for community in communities:
        degree = built.member_degrees(community)
        by_member = {member: degree[node] for node in community for member in built.members[node]}
        members = sorted(by_member)
        representative = max(members, key=by_member.__getitem__)  # first (lowest id) on ties
        clusters.append(RawCluster(members, representative))
    return _ordered(clusters)


def embedding_clusters(ids: list[str], vectors: np.ndarray, n_clusters: int) -> list[RawCluster]:
    from sklearn.cluster import AgglomerativeClustering

    if len(ids) > EMBEDDING_LIMIT:
        raise ClusterLimitError(
            f"method 'embedding' clusters at most {EMBEDDING_LIMIT:,} incidents (it holds every pairwise distance); "
            f"this library has {len(ids):,}: use method 'graph'")
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


def cluster_id(method: ClusterMethod, number: int) -> str:
    """The id of the ``number``-th cluster (from 1, in :func:`_ordered` order) of ``method``: g-01, e-07."""
    return f"{'g' if method is ClusterMethod.graph else 'e'}-{number:02d}"


def _ordered(clusters: list[RawCluster]) -> list[RawCluster]:
    return sorted(clusters, key=lambda c: (-len(c.members), c.representative))


def quality(causes: Mapping[str, Sequence[str]], clusters: list[RawCluster]) -> ClusterQuality:
    """Purity (a member is pure when it carries the cluster's most common cause) and NMI on first-listed causes,
    from each member's curated causes (``causes``: by incident id)."""
    from sklearn.metrics import normalized_mutual_info_score

    total = sum(len(c.members) for c in clusters)
    pure = 0
    truth, predicted = [], []
    for index, cluster in enumerate(clusters):
        counts = Counter(cause for m in cluster.members for cause in causes[m])
        if counts:
            top = counts.most_common(1)[0][0]
            pure += sum(1 for m in cluster.members if top in causes[m])
        for member in cluster.members:
            truth.append(causes[member][0] if causes[member] else "none")
            predicted.append(index)
    return ClusterQuality(
        purity=round(pure / total, 4) if total else 0.0,
        nmi=round(float(normalized_mutual_info_score(truth, predicted)), 4) if total else 0.0,
        clusters=len(clusters),
        singletons=sum(1 for c in clusters if len(c.members) == 1),
    )


def describe(rows: Sequence[ClusterRow], data: LibraryData, clusters: list[RawCluster], method: ClusterMethod,
             lang: str) -> ClusterSet:
    vocab = data.vocab
    by_id = {row.id: row for row in rows}
    total = len(rows)
    df = Counter(cid for row in rows for cid in row.concepts)
    title_df = Counter(t for row in rows for t in row.title_terms)
    views = []
    for number, cluster in enumerate(clusters, 1):
        size = len(cluster.members)
        members = [by_id[m] for m in cluster.members]
        counts = Counter(cid for row in members for cid in row.concepts)
        scored = []
        for concept_id, count in counts.items():
            lift = (count / size) / (df[concept_id] / total)
            if count >= min(MIN_DEFINING_COUNT, size) and lift > 1:
                scored.append((count * math.log(lift), count, concept_id))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
        defining = [
            ConceptCount(id=cid, kind=vocab.get(cid).kind.value, label=vocab.label(cid, lang), count=count)  # type: ignore[union-attr]
            for _, count, cid in scored[:DEFINING_SHOWN]
        ]
        top = [c.id for c in defining[:LABEL_CONCEPTS]]
        labels = {code: " · ".join(vocab.label(cid, code) for cid in top) or by_id[cluster.representative].summaries[code].title
                  for code in ("en", "ko")}
        terms_count = Counter(t for row in members for t in row.title_terms)
        terms = [t for t, _ in sorted(terms_count.items(), key=lambda kv: (-kv[1] * math.log(1 + total / title_df[kv[0]]), kv[0]))
                 if len(t) >= MIN_TERM_CHARS and not t.isdigit()][:TERMS_SHOWN]
        views.append(ClusterView(
            id=cluster_id(method, number), method=method.value, label=labels[lang], labels=labels, size=size,
            representative=cluster.representative, defining_concepts=defining, terms=terms,
            members=[row.summaries[lang] for row in members],
        ))
    return ClusterSet(method=method.value, quality=quality({row.id: row.causes for row in rows}, clusters), clusters=views)
