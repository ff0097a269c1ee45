"""The in-process graph store: an rdflib ``Graph`` built from the YAML at start (the default)."""

from __future__ import annotations

import json

from rdflib import Graph

from .sparql import prepare
from .store import GRAPH_KINDS, GraphStoreConfig, QueryKind, StoreAnswer


class MemoryStore:
    """An rdflib graph behind the :class:`~.store.GraphStore` protocol; nothing persists, so it holds no hash."""

    def __init__(self, graph: Graph, config: GraphStoreConfig | None = None) -> None:
        self.graph = graph
        self.config = config or GraphStoreConfig()
        self._hash: str | None = None

    def query(self, sparql: str, kind: QueryKind, timeout: float | None = None) -> StoreAnswer:
        """rdflib evaluates in this thread and cannot be interrupted: the caller bounds the time (api.sparql_runner)."""
        result = self.graph.query(prepare(sparql))
        if kind == "ASK":  # the SPARQL JSON form directly: no serializer plugin to look up in a forked worker
            return StoreAnswer(kind, json.dumps({"head": {}, "boolean": bool(result.askAnswer)}).encode())
        if kind not in GRAPH_KINDS:
            return StoreAnswer(kind, result.serialize(format="json") or b"{}")
        out = Graph()
        for triple in result:
            out.add(triple)  # type: ignore[arg-type]  # CONSTRUCT/DESCRIBE results are triples
        return StoreAnswer(kind, out.serialize(format="nt", encoding="utf-8"))

    def dump(self) -> bytes:
        return self.graph.serialize(format="nt", encoding="utf-8")

    def stored_hash(self) -> str | None:
        return self._hash

    def replace(self, ntriples: bytes, content_hash: str) -> None:
        fresh = Graph()
        fresh.parse(data=ntriples, format="nt")
        for prefix, namespace in self.graph.namespaces():
            fresh.bind(prefix, namespace)
        self.graph, self._hash = fresh, content_hash

    def close(self) -> None:
        """Nothing to release: the graph is garbage-collected with the library."""
