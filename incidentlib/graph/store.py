"""Where the library's RDF lives: a small protocol and the choice of backend.

Three backends, one module each:

* ``memory`` (:mod:`.store_memory`): the in-process rdflib graph, built from the YAML at start;
* ``oxigraph:PATH`` (:mod:`.store_oxigraph`): an embedded Oxigraph store on disk at ``PATH``;
* ``http(s)://…`` (:mod:`.store_remote`): any SPARQL 1.1 endpoint (Query, Update and the Graph
  Store Protocol over HTTP), e.g. an ``oxigraph serve`` process shared by several replicas.

Every backend answers in the same wire formats (SPARQL JSON results for SELECT/ASK, N-Triples
for CONSTRUCT/DESCRIBE and for the whole graph), so :mod:`.sparql`, the NetworkX projection and
the exports read every store the same way.

The library's triples live in the store's default graph.  A persistent store also keeps one
triple in the named graph :data:`META_GRAPH`: ``<META_GRAPH> il:contentHash "…"``, the
:func:`graph_content_hash` of what was loaded.  :func:`ensure_loaded` (re)loads the default
graph only when that hash is missing or differs from the library's, so a restart does not
reload, and a crash during a load (the hash is removed first, written last) reloads next time.

After a write only the changed incidents' triples change: :func:`follow_change` *patches* the
store (``GraphStore.patch``: the :class:`~.rdf.GraphDelta` removed and added, and the hash moved
from the old content's to the new one's, in one transaction that applies only while the store
still holds the old content), and falls back to a full load when the store holds anything else
or the change is too large for a patch to pay.
"""

from __future__ import annotations

import functools
import hashlib
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidRequest
from ..loader import LibraryData

if TYPE_CHECKING:
    from rdflib import Graph

    from .rdf import GraphDelta

# rdflib (and .ontology, built on it) is imported where a graph is made: a library opens a store
# configuration on every command, and most commands never touch RDF.

# Bump when build_graph's output changes for the same data files (a new triple, a renamed
# property): stores loaded by an older version then see a different hash and reload.
GRAPH_LAYOUT_VERSION = "1"
META_GRAPH = "urn:incidentlib:meta"
CONTENT_HASH = "https://w3id.org/incidentlib/ontology#contentHash"
# Seconds an HTTP request to a remote store may wait for its answer when the caller gives no
# limit (loading the bundled library over HTTP takes about a second; 300 s leaves room for a
# library a hundred times larger on a slow endpoint).
DEFAULT_HTTP_TIMEOUT_SECONDS = 300.0
#: Changed incidents above which a change is loaded in bulk rather than patched: a patch costs a few
#: milliseconds per incident (its triples built twice and sent as SPARQL Update text, which stores
#: parse more slowly than a bulk N-Triples load), so a large import is cheaper to reload whole.
PATCH_MAX_INCIDENTS = 1_000


@functools.cache
def prefix_iris() -> dict[str, str]:
    """The prefixes every query may use without declaring them (il:, skos:, dcterms:, …), by name."""
    from .ontology import PREFIXES

    return {prefix: str(namespace) for prefix, namespace in PREFIXES.items()}


QueryKind = Literal["SELECT", "ASK", "CONSTRUCT", "DESCRIBE"]
GRAPH_KINDS: frozenset[str] = frozenset({"CONSTRUCT", "DESCRIBE"})


class StoreKind(str, Enum):
    memory = "memory"
    oxigraph = "oxigraph"
    remote = "remote"


class GraphStoreConfig(BaseModel):
    """Which graph store a library uses.  ``location`` is the Oxigraph directory or the endpoint's base URL.

    A remote endpoint's three services default to Oxigraph's layout (``BASE/query``,
    ``BASE/update``, ``BASE/store``); other servers set ``query_url``, ``update_url`` and
    ``store_url`` (Fuseki: all three are ``http://host:3030/DATASET``).
    """

    model_config = ConfigDict(frozen=True)

    kind: StoreKind = StoreKind.memory
    location: str | None = None
    query_url: str | None = None
    update_url: str | None = None
    store_url: str | None = None

    @property
    def spec(self) -> str:
        """The ``--graph-store`` value that gives this configuration."""
        if self.kind is StoreKind.memory:
            return "memory"
        if self.kind is StoreKind.oxigraph:
            return f"oxigraph:{self.location}"
        return str(self.location)


def parse_graph_store(spec: str | None) -> GraphStoreConfig:
    """``memory`` (or nothing), ``oxigraph:PATH`` or an ``http(s)://`` URL; anything else is an :class:`InvalidRequest`."""
    text = (spec or "").strip()
    if not text or text == "memory":
        return GraphStoreConfig()
    if text.startswith("oxigraph:"):
        path = text.removeprefix("oxigraph:").strip()
        if not path:
            raise InvalidRequest("--graph-store: oxigraph:PATH needs a directory after 'oxigraph:'")
        return GraphStoreConfig(kind=StoreKind.oxigraph, location=str(Path(path).expanduser()))
    if text.startswith(("http://", "https://")):
        return GraphStoreConfig(kind=StoreKind.remote, location=text.rstrip("/"))
    raise InvalidRequest(f"--graph-store: expected memory, oxigraph:PATH or an http(s):// URL, got {text!r}")


@dataclass(frozen=True)
class StoreAnswer:
    """A query's answer as the store sent it: SPARQL JSON results (SELECT, ASK) or N-Triples (CONSTRUCT, DESCRIBE)."""

    kind: QueryKind
    body: bytes


class GraphStore(Protocol):
    """What the library needs from a graph store."""

    config: GraphStoreConfig

    def query(self, sparql: str, kind: QueryKind, timeout: float | None = None) -> StoreAnswer:
        """Run an already checked read-only query whose form is ``kind``; the library's prefixes are predeclared."""
        ...

    def dump(self) -> bytes:
        """Every triple of the default graph as N-Triples."""
        ...

    def stored_hash(self) -> str | None:
        """The content hash recorded with the loaded triples, None when the store has none."""
        ...

    def replace(self, ntriples: bytes, content_hash: str) -> None:
        """Replace the default graph with ``ntriples`` and record ``content_hash`` (removed first, written last)."""
        ...

    def patch(self, delta: GraphDelta, old_hash: str, new_hash: str) -> bool:
        """Apply ``delta`` and move the recorded hash from ``old_hash`` to ``new_hash`` atomically, only if the
        store holds ``old_hash``; True when it now holds ``new_hash``."""
        ...

    def close(self) -> None: ...


def read_graph(store: GraphStore) -> Graph:
    """Every triple of the store's default graph as an rdflib graph with the library's prefixes (for exports)."""
    from .store_memory import MemoryStore

    if isinstance(store, MemoryStore):
        return store.graph
    from rdflib import Graph

    from .ontology import bind_prefixes

    graph = Graph()
    bind_prefixes(graph)
    graph.parse(data=store.dump(), format="nt")
    return graph


def graph_content_hash(data: LibraryData) -> str:
    """``sha256(GRAPH_LAYOUT_VERSION \\0 data files' hash)``: what the store must hold for this library."""
    return hashlib.sha256(f"{GRAPH_LAYOUT_VERSION}\0{data.content_hash}".encode()).hexdigest()


def ensure_loaded(store: GraphStore, data: LibraryData) -> bool:
    """Bulk-load the library's RDF into ``store`` unless it already holds this content; True when it loaded."""
    wanted = graph_content_hash(data)
    if store.stored_hash() == wanted:
        return False
    from .rdf import build_graph  # only needed when the store is empty or stale

    store.replace(build_graph(data).serialize(format="nt", encoding="utf-8"), wanted)
    return True


def patch_update(delta: GraphDelta, old_hash: str, new_hash: str) -> str:
    """One SPARQL Update applying ``delta`` only while the store records ``old_hash`` (a compare-and-swap).

    ``DELETE { old hash, removed triples } INSERT { new hash, added triples } WHERE { old hash }``:
    the templates hold ground triples, so when the WHERE clause does not match nothing changes.
    """
    from .rdf import delta_ntriples

    meta = f"<{META_GRAPH}> <{CONTENT_HASH}>"
    return (f'DELETE {{ GRAPH <{META_GRAPH}> {{ {meta} "{old_hash}" }}\n{delta_ntriples(delta.removed)} }}\n'
            f'INSERT {{ GRAPH <{META_GRAPH}> {{ {meta} "{new_hash}" }}\n{delta_ntriples(delta.added)} }}\n'
            f'WHERE {{ GRAPH <{META_GRAPH}> {{ {meta} "{old_hash}" }} }}')


def follow_change(store: GraphStore, before: LibraryData, after: LibraryData, changed: set[str]) -> str:
    """Bring ``store`` from ``before``'s graph to ``after``'s: ``"current"`` when it already holds it (another
    replica got there first), ``"patched"`` when the changed incidents' delta applied, else ``"loaded"``
    (a full :func:`ensure_loaded`: the store held other content, or more than :data:`PATCH_MAX_INCIDENTS` changed)."""
    wanted = graph_content_hash(after)
    stored = store.stored_hash()
    if stored == wanted:
        return "current"
    if stored == graph_content_hash(before) and len(changed) <= PATCH_MAX_INCIDENTS:
        from .rdf import graph_delta

        if store.patch(graph_delta(before, after, changed), stored, wanted):
            return "patched"
    ensure_loaded(store, after)
    return "loaded"


def reading(store: GraphStore) -> AbstractContextManager[object]:
    """Hold while reading a store's graph object directly (an export): an in-process graph is patched in place."""
    from .store_memory import MemoryStore

    return store.lock if isinstance(store, MemoryStore) else nullcontext()


def open_store(config: GraphStoreConfig, data: LibraryData) -> GraphStore:
    """The configured store, holding ``data``'s graph (loaded now when it is empty or stale)."""
    if config.kind is StoreKind.memory:
        from .rdf import build_graph
        from .store_memory import MemoryStore

        return MemoryStore(build_graph(data), config, graph_content_hash(data))
    store: GraphStore
    if config.kind is StoreKind.oxigraph:
        from .store_oxigraph import OxigraphStore

        store = OxigraphStore(config)
    else:
        from .store_remote import RemoteStore

        store = RemoteStore(config)
    ensure_loaded(store, data)
    return store
