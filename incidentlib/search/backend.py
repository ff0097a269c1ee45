"""Where ranking runs: a small protocol and the choice of backend.

Two backends, one module each:

* ``local`` (:mod:`.backend_local`, the default): BM25 over numpy postings and the dense index
  (exact numpy or FAISS HNSW) in this process;
* ``milvus:PATH`` or ``milvus:http(s)://HOST:PORT`` (:mod:`.backend_milvus`): the same chunks,
  BM25 weights and vectors kept in a Milvus collection, embedded (milvus-lite, a file at ``PATH``)
  or on a Milvus server or cluster (the same client API).

Both rank the same way: an incident scores as its best chunk (``max`` over its chunks), only
incidents with a positive BM25 score count for the lexical ranking, ties rank the earlier
incident first.  Fusion of the two rankings stays in :mod:`.fusion`, in this process.
"""

from __future__ import annotations

import weakref
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from ..errors import InvalidRequest

if TYPE_CHECKING:
    from .dense import ProgressFn
    from .engine import SearchEngine

#: The option (and environment variable) that chooses the backend; errors name it.
BACKEND_OPTION = "--search-backend"
BACKEND_ENV = "INCIDENTLIB_SEARCH_BACKEND"
LOCAL = "local"
MILVUS_PREFIX = "milvus:"
#: pymilvus starts an embedded milvus-lite for a URI ending in this, and connects to a server otherwise.
EMBEDDED_SUFFIX = ".db"

#: One ranked incident: (incident id, its best chunk's score, that chunk's position in ``SearchEngine.chunks``).
Ranked = tuple[str, float, int]


class BackendKind(str, Enum):
    local = "local"
    milvus = "milvus"


def parse_search_backend(spec: str | None) -> str:
    """``local`` (or nothing), ``milvus:PATH`` or ``milvus:http(s)://HOST:PORT``, normalised; anything else
    is an :class:`InvalidRequest` naming ``--search-backend``."""
    text = (spec or "").strip()
    if not text or text == LOCAL:
        return LOCAL
    if text.startswith(MILVUS_PREFIX):
        target = text.removeprefix(MILVUS_PREFIX).strip()
        if not target:
            raise InvalidRequest(f"{BACKEND_OPTION}: milvus:PATH needs a file path or an http(s):// URL after 'milvus:'")
        if target.startswith(("http://", "https://")):
            return MILVUS_PREFIX + target.rstrip("/")
        if "://" in target:
            raise InvalidRequest(f"{BACKEND_OPTION}: a Milvus server is an http(s):// URL, got {target!r}")
        if not target.endswith(EMBEDDED_SUFFIX):
            raise InvalidRequest(f"{BACKEND_OPTION}: an embedded Milvus is a file whose name ends in {EMBEDDED_SUFFIX} "
                                 f"(milvus-lite's convention), got {target!r}")
        return MILVUS_PREFIX + str(Path(target).expanduser())
    raise InvalidRequest(f"{BACKEND_OPTION}: expected local, milvus:PATH or milvus:http(s)://HOST:PORT, got {text!r}")


def backend_kind(spec: str) -> BackendKind:
    """The kind of an already parsed backend value."""
    return BackendKind.milvus if spec.startswith(MILVUS_PREFIX) else BackendKind.local


class SearchBackend(Protocol):
    """What the engine needs from a ranking backend (filters apply before ranking in both)."""

    spec: str

    def prepare(self, progress: ProgressFn | None = None) -> None:
        """Make the backend hold the engine's current chunks (a no-op when it already does)."""
        ...

    def rank_lexical(self, query: str, allowed: set[str] | None, depth: int | None) -> list[Ranked]:
        """Incidents by their best chunk's BM25 score (positive only), best first, at most ``depth``."""
        ...

    def rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None, depth: int) -> list[Ranked]:
        """Incidents by their best chunk's inner product with the normalised ``vector``, best first."""
        ...


def open_backend(engine: SearchEngine, spec: str) -> SearchBackend:
    """The backend ``spec`` names, ranking ``engine``'s chunks.

    The engine holds its backend, and the backend gets a weak reference back: the pair then makes no reference
    cycle, so an engine a live library replaces after a write (its BM25 arrays alone are 1.2 GB at 100k incidents)
    is freed when the library drops it, not whenever the cyclic collector next runs."""
    engine = cast("SearchEngine", weakref.proxy(engine))
    if backend_kind(spec) is BackendKind.milvus:
        from .backend_milvus import MilvusBackend

        return MilvusBackend(engine, spec.removeprefix(MILVUS_PREFIX))
    from .backend_local import LocalBackend

    return LocalBackend(engine)
