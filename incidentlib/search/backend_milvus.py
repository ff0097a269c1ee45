"""Ranking on Milvus: the chunks, their BM25 weights and their vectors in one Milvus collection.

``milvus:PATH.db`` runs Milvus embedded (milvus-lite, a file on disk); ``milvus:http://HOST:19530``
talks to a Milvus server or cluster through the same client API.

One collection per (library content, embedder, vocabulary), named ``il_`` + the first 32 hex digits of
its content key (:func:`content_key`).  Its fields:

* ``chunk`` (INT64, primary key): the chunk's position in ``SearchEngine.chunks``;
* ``incident`` (VARCHAR): the chunk's incident id, which filters use (``incident in [...]``);
* ``dense`` (FLOAT_VECTOR): the engine's normalised chunk vector, searched by inner product
  (= cosine), FLAT (exact) below ``hnsw_threshold`` chunks and HNSW at or above it, like the local index;
* ``sparse`` (SPARSE_FLOAT_VECTOR): the chunk's BM25 weights ``w(t, c)`` from our own tokenizer
  (:mod:`.lexical`, term id → weight).  A query is the sparse vector of its token counts, so the inner
  product is ``Σ_t count(t) · w(t, c)``, the in-process BM25 score; Korean particles and Hangul bigrams
  are handled by our tokenizer, not by Milvus's analyzers.

Incidents score as their best chunk: a grouping search (``group_by_field="incident"``, one hit per
group) returns each incident's best chunk.  Ties at the cut are settled as locally (the earlier incident
first) by fetching past the cut until the next score differs.

A collection is filled under a temporary name, described (``incidentlib.meta`` property: format,
content key, embedder, chunks), then renamed, so a collection under the final name is complete.  On
open the description and the row count are checked: a mismatch is rebuilt, a collection with our name
that we did not describe is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import SearchBackendError
from .backend import BACKEND_OPTION, MILVUS_PREFIX, Ranked
from .dense import kind_for
from .hnsw import EF_CONSTRUCTION, EF_SEARCH, HNSW_M
from .lexical import BM25_B, BM25_K1, Postings

if TYPE_CHECKING:
    from .dense import ProgressFn
    from .engine import SearchEngine

logger = logging.getLogger(__name__)

#: Bump when the collection's fields or their meaning change: older collections then get a new name.
MILVUS_FORMAT = 1
COLLECTION_PREFIX = "il_"
#: Hex digits of the content key in the collection name (128 bits: no accidental collision).
NAME_DIGITS = 32
META_PROPERTY = "incidentlib.meta"
#: Rows a single insert carries: 1,000 × (a 1,024-dim float32 vector + ~100 sparse terms) is ~5 MB,
#: well under Milvus's 64 MB gRPC message limit, and few enough round trips for 100k chunks.
INSERT_BATCH = 1000
#: Milvus's default ``maxTopK``: no search may ask for more hits than this.
MAX_TOPK = 16384
#: Seconds to wait for a Milvus server before saying it is unreachable (a local server answers in ms).
CONNECT_TIMEOUT_SECONDS = 10.0
#: Longest incident id the ``incident`` field holds (ids are ``IL-NNNN``-like; room for imported ones).
MAX_ID_CHARS = 256

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _client(target: str) -> Any:
    """One client per target per process (an embedded milvus-lite file opens once)."""
    with _clients_lock:
        client = _clients.get(target)
        if client is not None:
            return client
        try:
            from pymilvus import MilvusClient
        except ImportError:
            raise SearchBackendError(f"{BACKEND_OPTION} {MILVUS_PREFIX}{target}: needs pymilvus and milvus-lite "
                                     "(pip install 'incidentlib[milvus]')") from None
        if not target.startswith(("http://", "https://")):
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        try:
            client = MilvusClient(uri=target, timeout=CONNECT_TIMEOUT_SECONDS)
        except Exception as exc:  # noqa: BLE001 - pymilvus raises MilvusException and gRPC/OS errors alike
            raise SearchBackendError(f"{BACKEND_OPTION} {MILVUS_PREFIX}{target}: cannot open or reach Milvus "
                                     f"({_reason(exc)})") from None
        _clients[target] = client
        return client


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc).strip() or type(exc).__name__


def content_key(engine: SearchEngine) -> str:
    """``sha256`` of the format, the BM25 parameters, the embedder (name, dimension), the lexical vocabulary in
    term-id order, and every chunk's (id, incident, text): what a collection must have been filled from."""
    digest = hashlib.sha256()
    postings = engine.lexical.postings
    head = {"format": MILVUS_FORMAT, "k1": BM25_K1, "b": BM25_B, "embedder": engine.embedder.name,
            "dim": int(engine.dense.vectors.shape[1]), "chunks": len(engine.chunks), "terms": len(postings.vocabulary)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for term in postings.vocabulary:
        digest.update(term.encode())
        digest.update(b"\0")
    for chunk in engine.chunks:
        digest.update(f"{chunk.id}\0{chunk.incident_id}\0{chunk.text}\0".encode())
    return digest.hexdigest()


class MilvusBackend:
    """Lexical (sparse BM25) and dense ranking in a Milvus collection; fusion stays in :mod:`.fusion`."""

    def __init__(self, engine: SearchEngine, target: str) -> None:
        self.engine = engine
        self.target = target
        self.spec = MILVUS_PREFIX + target
        self.client = _client(target)
        self._lock = threading.Lock()
        self._collection: str | None = None
        #: What the last :meth:`prepare` did: ``reused``, ``filled`` or ``rebuilt (reason)``.
        self.action: str | None = None

    def _fail(self, what: str, exc: BaseException) -> SearchBackendError:
        return SearchBackendError(f"{BACKEND_OPTION} {self.spec}: {what} failed ({_reason(exc)})")

    # ---- filling ---------------------------------------------------------------------
    @property
    def collection(self) -> str:
        """The name of the filled, loaded collection (filled now on first use)."""
        if self._collection is None:
            self.prepare()
        assert self._collection is not None
        return self._collection

    def prepare(self, progress: ProgressFn | None = None) -> None:
        """Use the collection for this content when it is there and intact, else fill one (``progress(done, total)``)."""
        with self._lock:
            if self._collection is not None:
                return
            key = content_key(self.engine)
            name = COLLECTION_PREFIX + key[:NAME_DIGITS]
            meta = {"format": MILVUS_FORMAT, "key": key, "embedder": self.engine.embedder.name,
                    "chunks": len(self.engine.chunks), "library": str(self.engine.data.root)}
            try:
                problem = self._check(name, meta) if self.client.has_collection(name) else "missing"
                if problem is None:
                    self.action = "reused"
                else:
                    if problem != "missing":
                        logger.warning("%s: collection %s %s; rebuilding it", self.spec, name, problem)
                        self.client.drop_collection(name)
                    self._fill(name, meta, progress)
                    self.action = "filled" if problem == "missing" else f"rebuilt ({problem})"
                self.client.load_collection(name)
            except SearchBackendError:
                raise
            except Exception as exc:  # noqa: BLE001 - pymilvus raises MilvusException and gRPC errors alike
                raise self._fail(f"preparing collection {name}", exc) from None
            self._collection = name

    def _check(self, name: str, meta: dict[str, Any]) -> str | None:
        """None when ``name`` holds exactly what ``meta`` describes, else why not (rebuilt); raises when the
        collection carries no description of ours (not ours to drop)."""
        properties = self.client.describe_collection(name).get("properties") or {}
        if META_PROPERTY not in properties:
            raise SearchBackendError(f"{BACKEND_OPTION} {self.spec}: collection {name} exists but was not made by "
                                     f"incidentlib (no {META_PROPERTY} property); drop or rename it, or use another target")
        try:
            stored = json.loads(properties[META_PROPERTY])
        except ValueError:
            return f"has an unreadable {META_PROPERTY}"
        for field in ("format", "key", "embedder", "chunks"):
            if stored.get(field) != meta[field]:
                return f"was filled for another {field} ({stored.get(field)!r})"
        self.client.load_collection(name)
        rows = self._count(name)
        if rows != meta["chunks"]:
            return f"holds {rows} rows, not {meta['chunks']}"
        return None

    def _count(self, name: str) -> int:
        answer = self.client.query(name, filter="", output_fields=["count(*)"])
        return int(answer[0]["count(*)"])

    def _fill(self, name: str, meta: dict[str, Any], progress: ProgressFn | None) -> None:
        """Create the collection under a temporary name, insert every chunk in batches, describe it, rename it."""
        from pymilvus import DataType, MilvusClient

        engine = self.engine
        total = len(engine.chunks)
        dim = int(engine.dense.vectors.shape[1])
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("chunk", DataType.INT64, is_primary=True)
        schema.add_field("incident", DataType.VARCHAR, max_length=MAX_ID_CHARS)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        index = self.client.prepare_index_params()
        if kind_for(total, engine.config.hnsw_threshold, engine.config.ivf_threshold) != "flat":
            index.add_index(field_name="dense", index_type="HNSW", metric_type="IP",
                            params={"M": HNSW_M, "efConstruction": EF_CONSTRUCTION})
        else:
            index.add_index(field_name="dense", index_type="FLAT", metric_type="IP")
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        temporary = f"{name}_filling_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.client.create_collection(temporary, schema=schema)
        # not waited for here (pymilvus would poll the index state every 0.5 s): loading waits for it
        self.client.create_index(temporary, index, sync=False)
        try:
            sparse = _ChunkTerms(engine.lexical.postings)
            for start in range(0, total, INSERT_BATCH):
                end = min(total, start + INSERT_BATCH)
                # a batch's vectors and sparse rows made for it alone: nothing of every chunk is held as Python objects
                vectors = np.asarray(engine.chunk_vector_block(start, end), dtype=np.float32).tolist()
                self.client.insert(temporary, [
                    {"chunk": position, "incident": engine.chunks[position].incident_id,
                     "dense": vector, "sparse": terms}
                    for position, vector, terms in zip(range(start, end), vectors, sparse.rows(start, end), strict=True)])
                if progress is not None:
                    progress(end, total)
            self.client.flush(temporary)
            self.client.alter_collection_properties(temporary, properties={META_PROPERTY: json.dumps(meta)})
            if self.client.has_collection(name):  # another process filled it meanwhile: keep theirs
                self.client.drop_collection(temporary)
                return
            self.client.rename_collection(temporary, name)
        except BaseException:
            if self.client.has_collection(temporary):
                self.client.drop_collection(temporary)
            raise

    # ---- ranking ---------------------------------------------------------------------
    def _query_sparse(self, query: str) -> dict[int, float]:
        """The query's token counts by term id (unknown tokens dropped): ``Σ count(t)·w(t, c)`` is the BM25 score."""
        return {term: float(count) for term, count in self.engine.lexical.term_counts(query).items()}

    def _filter(self, allowed: set[str] | None) -> str:
        if allowed is None:
            return ""
        return "incident in [" + ", ".join(json.dumps(i) for i in sorted(allowed)) + "]"

    def _ranked(self, field: str, data: list[float] | dict[int, float], allowed: set[str] | None,
                depth: int | None, positive: bool, params: dict[str, Any]) -> list[Ranked]:
        """Best chunk per incident from a grouping search, ranked by score then library order, ``depth`` of them.

        Fetches one incident past the cut; while the incident there ties the last one kept, fetches twice
        as many, so a tie is settled as the local backend settles it (the earlier incident first).
        """
        available = len(self.engine.data.incidents) if allowed is None else len(allowed & self.engine.data.incidents.keys())
        wanted = available if depth is None else min(depth, available)
        if wanted <= 0:
            return []
        limit = min(wanted + 1, available, MAX_TOPK)
        name = self.collection
        while True:
            try:
                answer = self.client.search(
                    name, data=[data], anns_field=field, limit=limit, filter=self._filter(allowed),
                    output_fields=["chunk", "incident"], group_by_field="incident", group_size=1,
                    search_params={"metric_type": "IP", "params": params})
            except Exception as exc:  # noqa: BLE001 - pymilvus raises MilvusException and gRPC errors alike
                raise self._fail(f"searching {field} in {name}", exc) from None
            hits = [(str(hit["entity"]["incident"]), float(hit["distance"]), int(hit["entity"]["chunk"])) for hit in answer[0]]
            if positive:
                hits = [hit for hit in hits if hit[1] > 0]
            hits.sort(key=lambda hit: (-hit[1], self.engine.incident_position(hit[0])))
            tied = len(hits) > wanted and hits[wanted][1] == hits[wanted - 1][1]
            if not tied or limit >= min(available, MAX_TOPK):
                return hits[:wanted]
            limit = min(limit * 2, available, MAX_TOPK)

    def rank_lexical(self, query: str, allowed: set[str] | None, depth: int | None) -> list[Ranked]:
        vector = self._query_sparse(query)
        if not vector:
            return []
        return self._ranked("sparse", vector, allowed, depth, positive=True, params={})

    def rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None, depth: int) -> list[Ranked]:
        params = {"ef": max(EF_SEARCH, depth + 1)}  # HNSW's search breadth; FLAT ignores it
        return self._ranked("dense", np.asarray(vector, dtype=np.float32).tolist(), allowed, depth, positive=False, params=params)


class _ChunkTerms:
    """Each chunk's BM25 weights, ``{term id: w(t, c)}``, for a range of chunks at a time: the term-major postings
    turned chunk-major once (int32 terms and float32 weights, in chunk order), the dictionaries made per batch.
    Making one for every chunk at once held 13.5M dictionaries at 1M incidents."""

    def __init__(self, postings: Postings) -> None:
        terms = np.repeat(np.arange(len(postings.vocabulary), dtype=np.int32), np.diff(postings.indptr))
        order = np.argsort(postings.indices, kind="stable")
        self.terms, self.weights = terms[order], np.asarray(postings.data)[order]
        del terms, order
        self.bounds = np.zeros(postings.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(postings.indices, minlength=postings.size), out=self.bounds[1:])

    def rows(self, start: int, end: int) -> list[dict[int, float]]:
        bounds = self.bounds
        return [dict(zip(self.terms[bounds[c]:bounds[c + 1]].tolist(), self.weights[bounds[c]:bounds[c + 1]].tolist(),
                         strict=True)) for c in range(start, end)]
