"""A remote SPARQL 1.1 endpoint: Query and Update protocols, and the Graph Store Protocol for bulk loads.

Reads are ``POST query_url`` (``application/sparql-query``) asking for SPARQL JSON results or
N-Triples; a load is ``PUT store_url?default`` with the N-Triples (the Graph Store Protocol's
replace), bracketed by two updates that remove and then write the content hash in
:data:`~.store.META_GRAPH`.  Only the standard library's HTTP client is used.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import GraphStoreError, SparqlError
from .store import (
    CONTENT_HASH,
    DEFAULT_HTTP_TIMEOUT_SECONDS,
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

NTRIPLES = "application/n-triples"
RESULTS_JSON = "application/sparql-results+json"
# Characters of an endpoint's error body quoted in our message: enough for the server's reason.
ERROR_EXCERPT_CHARS = 500

_PROLOGUE = "".join(f"PREFIX {prefix}: <{iri}>\n" for prefix, iri in prefix_iris().items())


class RemoteStore:
    """A SPARQL 1.1 endpoint behind the :class:`~.store.GraphStore` protocol."""

    def __init__(self, config: GraphStoreConfig) -> None:
        assert config.location is not None
        base = config.location.rstrip("/")
        self.config = config
        self.query_url = config.query_url or f"{base}/query"
        self.update_url = config.update_url or f"{base}/update"
        self.store_url = config.store_url or f"{base}/store"

    @property
    def address(self) -> tuple[str, int]:
        """Host and port of the query service (the one address a confined SPARQL worker may connect to)."""
        parts = urlsplit(self.query_url)
        return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)

    def _send(self, url: str, body: bytes | None, method: str, headers: dict[str, str], timeout: float | None) -> bytes:
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout or DEFAULT_HTTP_TIMEOUT_SECONDS) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            reason = exc.read()[:ERROR_EXCERPT_CHARS].decode("utf-8", "replace").strip()
            if method == "POST" and url == self.query_url and 400 <= exc.code < 500:
                raise SparqlError(f"the SPARQL endpoint {url} refused the query (HTTP {exc.code}): {reason}") from None
            raise GraphStoreError(f"--graph-store {self.config.spec}: {method} {url} failed (HTTP {exc.code}): {reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise GraphStoreError(f"--graph-store {self.config.spec}: cannot reach {url}: {cause}") from None

    def query(self, sparql: str, kind: QueryKind, timeout: float | None = None) -> StoreAnswer:
        """The endpoint evaluates; ``timeout`` bounds the wait for its answer (the server's own limit may be lower)."""
        accept = NTRIPLES if kind in GRAPH_KINDS else RESULTS_JSON
        body = self._send(self.query_url, (_PROLOGUE + sparql).encode(), "POST",
                          {"Content-Type": "application/sparql-query", "Accept": accept}, timeout)
        return StoreAnswer(kind, body)

    def _update(self, sparql: str) -> None:
        self._send(self.update_url, sparql.encode(), "POST", {"Content-Type": "application/sparql-update"}, None)

    def dump(self) -> bytes:
        return self._send(f"{self.store_url}?default", None, "GET", {"Accept": NTRIPLES}, None)

    def stored_hash(self) -> str | None:
        answer = self.query(f"SELECT ?h WHERE {{ GRAPH <{META_GRAPH}> {{ <{META_GRAPH}> <{CONTENT_HASH}> ?h }} }}", "SELECT")
        bindings = json.loads(answer.body)["results"]["bindings"]
        return str(bindings[0]["h"]["value"]) if bindings else None

    def replace(self, ntriples: bytes, content_hash: str) -> None:
        self._update(f"DROP SILENT GRAPH <{META_GRAPH}>")  # a load cut short leaves no hash: the next start reloads
        self._send(f"{self.store_url}?default", ntriples, "PUT", {"Content-Type": NTRIPLES}, None)
        self._update(f'INSERT DATA {{ GRAPH <{META_GRAPH}> {{ <{META_GRAPH}> <{CONTENT_HASH}> "{content_hash}" }} }}')

    def patch(self, delta: GraphDelta, old_hash: str, new_hash: str) -> bool:
        """One conditional SPARQL Update request (:func:`~.store.patch_update`): if another replica changed the store
        first, its WHERE clause matches nothing and the store is left as that replica wrote it."""
        self._update(patch_update(delta, old_hash, new_hash))
        return self.stored_hash() == new_hash

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own connection."""
