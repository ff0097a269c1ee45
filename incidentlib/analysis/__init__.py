"""Root-cause exploration over a Library: clusters, diagnosis, signal explanations, maps."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UnknownClusterError
from ..graph.projection import node_id
from ..loader import each_record
from ..requests import check_lang
from ..views import ClusterSet, ClusterView, Diagnosis, MapPoint, SignalExplanation
from .clusters import ClusterMethod, ClusterRow, RawCluster, describe, embedding_clusters, graph_clusters, read_rows
from .diagnosis import diagnose
from .signatures import Sharers, explain_in

if TYPE_CHECKING:
    from ..library import Library

#: Louvain resolution: chosen with eval/cluster_quality.py (best purity/NMI against first-listed causes).
DEFAULT_RESOLUTION = 2.0
#: Largest neighbourhood picture: past 40 nodes the labels overlap.
MAX_PICTURE_NODES = 40


class Analysis:
    """Clusters, diagnosis, signal explanations and maps over one :class:`Library` (given, not imported)."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self._raw_cache: dict[ClusterMethod, tuple[RawCluster, ...]] = {}

    # ---- clusters ------------------------------------------------------------------
    @cached_property
    def _ids(self) -> list[str]:
        return [i.id for i in self.library.incidents() if not i.is_draft]

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

    def clusters(self, method: ClusterMethod | str = ClusterMethod.graph, lang: str = "en") -> ClusterSet:
        method = ClusterMethod(method)
        return describe(self._rows, self.library.data, list(self._raw(method)), method, check_lang(lang))

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
    def _points(self) -> np.ndarray:
        from .maps import project

        return project(self.vectors)

    def map_points(self, lang: str = "en") -> list[MapPoint]:
        """Every incident at its map position with its graph cluster (what map_png and map_html draw)."""
        membership = {member.id: c.id for c in self.clusters(ClusterMethod.graph, lang).clusters for member in c.members}
        return [MapPoint(id=i, title=self.library.get(i).title.get(lang), x=float(x), y=float(y), cluster=membership.get(i))
                for i, (x, y) in zip(self._ids, self._points, strict=True)]

    def map_png(self, lang: str = "en") -> bytes:
        from .maps import map_png

        titles = {i: self.library.get(i).title.get(lang) for i in self._ids}
        return map_png(self._ids, titles, self._points, self.clusters(ClusterMethod.graph, lang), lang)

    def map_html(self, lang: str = "en", link: str = "/incidents/{id}") -> str:
        from .maps import map_html

        titles = {i: self.library.get(i).title.get(lang) for i in self._ids}
        return map_html(self._ids, titles, self._points, self.clusters(ClusterMethod.graph, lang), lang, link)

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
