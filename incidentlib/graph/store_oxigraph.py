"""An embedded Oxigraph store (pyoxigraph, RocksDB on disk): the same SPARQL, evaluated natively.

One process opens a directory read-write (RocksDB takes a lock): several replicas share a graph
through an Oxigraph *server* instead (:mod:`.store_remote`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GraphStoreError
from .store import (
    CONTENT_HASH,
    GRAPH_KINDS,
    META_GRAPH,
    GraphStoreConfig,
    QueryKind,
    StoreAnswer,
    patch_update,
    prefix_iris,
)

if TYPE_CHECKING:
    from .rdf import GraphDelta


class OxigraphStore:
    """A pyoxigraph ``Store`` at ``config.location`` behind the :class:`~.store.GraphStore` protocol."""

    def __init__(self, config: GraphStoreConfig) -> None:
        try:
            import pyoxigraph
        except ImportError:
            raise GraphStoreError("--graph-store oxigraph:PATH needs the pyoxigraph package (pip install pyoxigraph)") from None
        self._ox = pyoxigraph
        self.config = config
        assert config.location is not None
        path = Path(config.location)
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._store = pyoxigraph.Store(str(path))
        except OSError as exc:
            raise GraphStoreError(f"--graph-store oxigraph:{path}: cannot open the store: {exc}") from None

    def query(self, sparql: str, kind: QueryKind, timeout: float | None = None) -> StoreAnswer:
        """Evaluated in this thread; pyoxigraph takes no time limit, so the caller bounds it (api.sparql_runner)."""
        ox = self._ox
        try:
            result = self._store.query(sparql, prefixes=prefix_iris())
        except SyntaxError as exc:
            from ..errors import SparqlError

            raise SparqlError(f"oxigraph refused the query: {exc}") from None
        if kind in GRAPH_KINDS:
            assert isinstance(result, ox.QueryTriples)
            return StoreAnswer(kind, result.serialize(format=ox.RdfFormat.N_TRIPLES) or b"")
        assert isinstance(result, ox.QuerySolutions | ox.QueryBoolean)
        return StoreAnswer(kind, result.serialize(format=ox.QueryResultsFormat.JSON) or b"{}")

    def dump(self) -> bytes:
        return self._store.dump(format=self._ox.RdfFormat.N_TRIPLES, from_graph=self._ox.DefaultGraph()) or b""

    def stored_hash(self) -> str | None:
        ox = self._ox
        meta = ox.NamedNode(META_GRAPH)
        for quad in self._store.quads_for_pattern(meta, ox.NamedNode(CONTENT_HASH), None, meta):
            value = quad.object
            return str(value.value) if isinstance(value, ox.Literal) else None
        return None

    def replace(self, ntriples: bytes, content_hash: str) -> None:
        ox = self._ox
        meta = ox.NamedNode(META_GRAPH)
        if self._store.contains_named_graph(meta):
            self._store.remove_graph(meta)  # a load cut short leaves no hash, so the next start reloads
        self._store.clear_graph(ox.DefaultGraph())
        self._store.bulk_load(ntriples, ox.RdfFormat.N_TRIPLES, to_graph=ox.DefaultGraph())
        self._store.add(ox.Quad(meta, ox.NamedNode(CONTENT_HASH), ox.Literal(content_hash), meta))
        self._store.flush()

    def patch(self, delta: GraphDelta, old_hash: str, new_hash: str) -> bool:
        """One SPARQL Update (:func:`~.store.patch_update`); pyoxigraph applies an update as one transaction."""
        if self.stored_hash() != old_hash:
            return False
        self._store.update(patch_update(delta, old_hash, new_hash))
        self._store.flush()
        return self.stored_hash() == new_hash

    def close(self) -> None:
        """Flush and drop the handle: RocksDB's directory lock goes with it, so another ``OxigraphStore`` may open it."""
        if hasattr(self, "_store"):
            self._store.flush()
            del self._store
