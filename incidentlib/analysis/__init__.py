"""Root-cause exploration over a Library: clusters, diagnosis, signal explanations, maps."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UnknownClusterError
from ..graph.projection import node_id
from ..loader import each_record
from ..requests import check_lang, check_members
from ..views import ClusterSet, ClusterView, Diagnosis, MapPoint, SignalExplanation
from .clusters import (
    ClusterMethod,
    ClusterRow,
    RawCluster,
    cluster_id,
    describe,
    embedding_clusters,
    graph_clusters,
    read_rows,
)
from .diagnosis import diagnose
from .signatures import Sharers, explain_in

if TYPE_CHECKING:
    from ..library import Library

#: Louvain resolution: chosen with eval/cluster_quality.py (best purity/NMI against first-listed causes).
DEFAULT_RESOLUTION = 2.0
#: Largest neighbourhood picture: past 40 nodes the labels overlap.
MAX_PICTURE_NODES = 40
#: Incidents placed on a map at most: a 960×640 map is covered by its 6-pixel dots well before that, and t-SNE of
#: 2,000 points takes a few seconds on two cores where 100k would take hours.  A larger library is sampled.
MAP_POINTS = 2_000
#: Seed of the map's sample: the same library always shows the same incidents.
MAP_SEED = 0


class Analysis:
    """Clusters, diagnosis, signal explanations and maps over one :class:`Library` (given, not imported)."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._raw_cache: dict[ClusterMethod, tuple[RawCluster, ...]] = {}

    # ---- clusters ------------------------------------------------------------------
    @cached_property
    def _ids(self) -> list[str]:
        """The published incidents, in the library's order (from the cluster rows: no record is kept)."""
        return [row.id for row in self._rows if row.published]

    @cached_property
    def _rows(self) -> list[ClusterRow]:
        return read_rows(self.library.data)

    @cached_property
    def vectors(self) -> np.ndarray:
        engine = self.library._search_engine
        return np.vstack([engine.incident_vector(i) for i in self._ids])

    def _raw(self, method: ClusterMethod) -> tuple[RawCluster, ...]:
        if method not in self._raw_cache:
            graph_result = graph_clusters(self._rows, resolution=DEFAULT_RESOLUTION)
            if method is ClusterMethod.graph:
                self._raw_cache[method] = tuple(graph_result)
            else:
                self._raw_cache[method] = tuple(embedding_clusters(self._ids, self.vectors, n_clusters=len(graph_result)))
        return self._raw_cache[method]

    def clusters(self, method: ClusterMethod | str = ClusterMethod.graph, lang: str = "en",
                 members: int | None = None) -> ClusterSet:
        method = ClusterMethod(method)
        found = describe(self._rows, self.library.data, list(self._raw(method)), method, check_lang(lang))
        if check_members(members) is None:
            return found
        return found.model_copy(update={"clusters": [c.model_copy(update={"members": c.members[:members]})
                                                     for c in found.clusters]})

    def cluster(self, cluster_id: str, lang: str = "en") -> ClusterView:
        method = ClusterMethod.embedding if cluster_id.startswith("e-") else ClusterMethod.graph
        for cluster in self.clusters(method, lang).clusters:
            if cluster.id == cluster_id:
                return cluster
        raise UnknownClusterError(cluster_id)

    # ---- diagnosis and signals -------------------------------------------------------
    def diagnose(self, symptoms: list[str] | None = None, text: str | None = None, lang: str = "en", limit: int = 5) -> Diagnosis:
        return diagnose(self.library, symptoms=symptoms, text=text, lang=check_lang(lang), limit=limit)

    def signals(self, lang: str = "en") -> list[SignalExplanation]:
        data, facets, lang = self.library.data, self.library._facets, check_lang(lang)
        sharers: dict[tuple[str, ...], Sharers] = {}  # this call's: the facets may be replaced by a write before the next
        # explained in the one pass that reads each record (each_record keeps none), not looked up by id after
        return [SignalExplanation(signal=s.text, incident_id=incident.id, matched=1.0,
                                  explanation=explain_in(incident, data.vocab, facets, s.text, lang, sharers))
                for incident in each_record(data.incidents) for s in incident.signals]

    # ---- pictures ----------------------------------------------------------------------
    @cached_property
    def _map_ids(self) -> list[str]:
        """The published incidents a map shows: all of them up to :data:`MAP_POINTS`, else a seeded sample that keeps
        each graph cluster's share of the library (at least its representative), in the library's order."""
        if len(self._ids) <= MAP_POINTS:
            return self._ids
        published = set(self._ids)
        rng = np.random.default_rng(MAP_SEED)
        chosen: set[str] = set()
        for cluster in self._raw(ClusterMethod.graph):
            members = [m for m in cluster.members if m in published]
            if not members:
                continue
            share = max(1, round(len(members) * MAP_POINTS / len(self._ids)))
            first = cluster.representative if cluster.representative in published else members[0]
            others = [m for m in members if m != first]
            chosen.add(first)
            chosen.update(others[i] for i in rng.choice(len(others), min(share - 1, len(others)), replace=False).tolist())
        return [i for i in self._ids if i in chosen]

    @cached_property
    def _points(self) -> np.ndarray:
        from .maps import project

        engine = self.library._search_engine
        vectors = self.vectors if self._map_ids is self._ids else np.vstack([engine.incident_vector(i) for i in self._map_ids])
        return project(vectors)

    def map_points(self, lang: str = "en") -> list[MapPoint]:
        """The map's incidents (:data:`MAP_POINTS` at most) at their positions, with their graph clusters (what
        map_png and map_html draw)."""
        # from the clusters alone: describing them would make a line for every member of the library
        membership = {member: cluster_id(ClusterMethod.graph, number)
                      for number, cluster in enumerate(self._raw(ClusterMethod.graph), 1) for member in cluster.members}
        titles = self._titles(check_lang(lang))
        return [MapPoint(id=i, title=titles[i], x=float(x), y=float(y), cluster=membership.get(i))
                for i, (x, y) in zip(self._map_ids, self._points, strict=True)]

    def _titles(self, lang: str) -> dict[str, str]:
        """The map's incidents' titles in ``lang``, from the cluster rows (no record read again)."""
        shown = set(self._map_ids)
        return {row.id: row.summaries[lang].title for row in self._rows if row.id in shown}

    @property
    def map_coverage(self) -> tuple[int, int]:
        """(incidents on the map, published incidents): the map samples past :data:`MAP_POINTS`."""
        return len(self._map_ids), len(self._ids)

    def map_png(self, lang: str = "en") -> bytes:
        from .maps import map_png

        titles = self._titles(check_lang(lang))
        return map_png(self._map_ids, titles, self._points, self.clusters(ClusterMethod.graph, lang), lang, total=len(self._ids))

    def map_html(self, lang: str = "en", link: str = "/incidents/{id}") -> str:
        from .maps import map_html

        titles = self._titles(check_lang(lang))
        return map_html(self._map_ids, titles, self._points, self.clusters(ClusterMethod.graph, lang), lang, link, total=len(self._ids))

    def neighbourhood_png(self, incident_id: str, lang: str = "en", related: int = 6) -> bytes:
        from .maps import neighbourhood_png

        incident = self.library.get(incident_id)
        kg = self.library._knowledge
        center = node_id("incident", incident.id)
        graph = kg.nx.subgraph([center, *(n for n in kg.nx[center] if not n.startswith("tag:"))]).copy()
        for item in kg.related(incident.id, lang=lang, limit=related):
            other = node_id("incident", item.id)
            for ref in item.shared_concepts:
                graph.add_edge(other, node_id(ref.kind, ref.id))
        labels = {n: (f"{n.split(':', 1)[1]} {kg.node_view(n, lang).label}" if n.startswith("incident:") else kg.node_view(n, lang).label)
                  for n in graph.nodes}
        return neighbourhood_png(graph, center, labels, check_lang(lang), max_nodes=MAX_PICTURE_NODES)


__all__ = ["Analysis", "ClusterMethod", "UnknownClusterError"]
