"""Graph queries over the projection: one object per loaded library, the algorithms in small modules.

- ``nodes``: a user's reference to a node, a node to its view
- ``refs``: concept and incident views shared by every answer
- ``scoring``: the related-incident score (formula in its docstring)
- ``walks``: neighbourhoods and shortest paths
- ``topics``: topic pages
- ``descent``: every concept below a concept in the vocabulary
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING

from ..gc_pause import collector_paused
from ..loader import LibraryData
from ..models import Incident
from ..views import ConceptRef, GraphNode, GraphPath, IncidentSummary, NodeLinkGraph, RelatedItem, TopicPage
from . import descent, refs
from .defaults import HUB_KINDS, RELATING_KINDS, TOPIC_LIST_LIMIT

if TYPE_CHECKING:
    import networkx as nx

    from .projection import Projection
    from .store import GraphStore

# The modules that need NetworkX (nodes, scoring, topics, walks, projection) are imported by the
# methods that use them: a search asks this object only for concept references.

__all__ = ["RELATING_KINDS", "KnowledgeGraph"]


class KnowledgeGraph:
    """Graph algorithms over one loaded library; the projection and document frequencies are built once."""

    def __init__(self, data: LibraryData, store: GraphStore | None = None) -> None:
        """``store``: the graph store the projection is read from (without one it is built from ``data``)."""
        self.data = data
        self.store = store
        self._nx: Projection | None = None
        # a server builds the projection in a background thread while it already answers: a request that needs
        # it meanwhile waits for that build here, instead of seeing a half-built graph or building a second one
        self._nx_lock = threading.Lock()

    @property
    def nx(self) -> nx.Graph:
        """The NetworkX projection, built once (from the records, or read from ``store``)."""
        graph = self._nx
        if graph is None:
            with self._nx_lock:
                graph = self._nx
                if graph is None:
                    from .projection import build_projection, projection_from_store

                    with collector_paused():  # a node and edge per record and link, none of them garbage
                        graph = build_projection(self.data) if self.store is None else projection_from_store(self.store, self.data)
                    self._nx = graph
        return graph

    def built_projection(self) -> Projection | None:
        """The projection if it has been built, else ``None`` (nothing is built)."""
        return self._nx

    def use_projection(self, graph: Projection) -> None:
        """Take ``graph`` as the projection of this library's data (one patched after a live write), unless one was
        built meanwhile."""
        with self._nx_lock:
            if self._nx is None:
                self._nx = graph

    # ---- node references and views ---------------------------------------------
    def resolve_node(self, reference: str) -> str:
        """Accept ``IL-0025``, ``nccl``, ``component:nccl`` or a label such as ``InfiniBand``."""
        from . import nodes

        return nodes.resolve_node(self.data, self.nx, reference)

    def node_view(self, node: str, lang: str) -> GraphNode:
        from . import nodes

        return nodes.node_view(self.data, node, lang)

    def concept_ref(self, concept_id: str, lang: str) -> ConceptRef:
        return refs.concept_ref(self.data, concept_id, lang)

    def summary(self, incident: Incident, lang: str) -> IncidentSummary:
        return refs.summary(self.data, incident, lang)

    # ---- related incidents -----------------------------------------------------
    @cached_property
    def document_frequency(self) -> dict[str, int]:
        from . import scoring

        return scoring.document_frequency(self.nx)

    def concept_weight(self, node: str) -> float:
        """``w(c) = ln(1 + N / df(c))`` (see ``graph.scoring``)."""
        from . import scoring

        return scoring.concept_weight(self.document_frequency, len(self.data.incidents), node)

    def related(self, incident_id: str, lang: str = "en", limit: int | None = 10) -> list[RelatedItem]:
        """Incidents sharing components or causes with ``incident_id``, best first (score in ``graph.scoring``)."""
        from . import scoring

        return scoring.related(self.data, self.nx, self.document_frequency, incident_id, lang, limit)

    # ---- neighbourhoods and paths ------------------------------------------------
    def neighbors(self, reference: str, depth: int = 1, lang: str = "en") -> NodeLinkGraph:
        """Everything within ``depth`` hops of a node (depth is capped at ``MAX_DEPTH``)."""
        from . import walks

        return walks.neighbors(self.data, self.nx, reference, depth, lang)

    def path(self, source: str, target: str, lang: str = "en", skip_kinds: tuple[str, ...] = HUB_KINDS) -> GraphPath | None:
        """The shortest path between two nodes, avoiding hub-like tag nodes by default."""
        from . import walks

        return walks.path(self.data, self.nx, source, target, lang, skip_kinds)

    # ---- topics and vocabulary -----------------------------------------------------
    def topic(self, reference: str, lang: str = "en", limit: int = TOPIC_LIST_LIMIT) -> TopicPage:
        """A concept's page: definition, incidents, co-occurring concepts, organizations."""
        from . import topics

        return topics.topic(self.data, self.nx, reference, lang, limit)

    def descendants(self, concept_id: str) -> set[str]:
        return descent.descendants(self.data.vocab, concept_id)
