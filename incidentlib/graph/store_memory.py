"""The in-process graph store: an rdflib ``Graph`` built from the YAML at start (the default)."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING

from rdflib import Graph

from .sparql import prepare
from .store import GRAPH_KINDS, GraphStoreConfig, QueryKind, StoreAnswer

if TYPE_CHECKING:
    from .rdf import GraphDelta


class MemoryStore:
    """An rdflib graph behind the :class:`~.store.GraphStore` protocol; the hash is that of the data it was built from.

    A patch changes the graph in place, so queries, dumps and patches take :attr:`lock`: a reader
    never sees half a change (nor an rdflib index resized under its iteration).
    """

    def __init__(self, graph: Graph, config: GraphStoreConfig | None = None, content_hash: str | None = None) -> None:
        self.graph = graph
        self.config = config or GraphStoreConfig()
        self._hash = content_hash
        self.lock = threading.RLock()

    def query(self, sparql: str, kind: QueryKind, timeout: float | None = None) -> StoreAnswer:
        """rdflib evaluates in this thread and cannot be interrupted: the caller bounds the time (api.sparql_runner)."""
        with self.lock:
            return self._query(sparql, kind)

    def _query(self, sparql: str, kind: QueryKind) -> StoreAnswer:
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
        with self.lock:
            return self.graph.serialize(format="nt", encoding="utf-8")

    def stored_hash(self) -> str | None:
        return self._hash

    def replace(self, ntriples: bytes, content_hash: str) -> None:
        fresh = Graph()
        fresh.parse(data=ntriples, format="nt")
        for prefix, namespace in self.graph.namespaces():
            fresh.bind(prefix, namespace)
        with self.lock:
            self.graph, self._hash = fresh, content_hash

    def patch(self, delta: GraphDelta, old_hash: str, new_hash: str) -> bool:
        """Remove and add the delta's triples in place (rdflib's memory store indexes each triple three ways)."""
        with self.lock:
            if self._hash != old_hash:
                return False
            for triple in delta.removed:
                self.graph.remove(triple)
            for triple in delta.added:
                self.graph.add(triple)
            self._hash = new_hash
            return True

    def close(self) -> None:
        """Nothing to release: the graph is garbage-collected with the library."""
