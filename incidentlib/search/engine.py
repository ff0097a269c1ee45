"""Hybrid search over incident chunks: BM25, dense vectors, and their fusion.

Incident score from chunk scores: an incident scores as its best chunk (max
over its chunks), and the best chunk is reported as the reason it matched.
Filters restrict the chunks searched *before* ranking (a mask over incidents for
BM25 and exact dense search, an id selector for HNSW), so a filtered query still
returns ``k`` results when ``k`` incidents match the filter.

Ranking never loops over chunks in Python: chunk scores (BM25, or the exact
inner products) are reduced to incident scores with one ``np.maximum.reduceat``
over the chunks grouped by incident, the top ``depth`` incidents are cut with a
partial sort, and only those incidents' chunks are searched for the best one.

A hybrid query's two legs are independent until fusion, so with the local backend the
BM25 leg runs on a worker thread of the engine (:data:`LEG_WORKERS`) while the calling
thread embeds the query and runs the dense leg. Both legs spend their time in numpy and
FAISS calls that release the GIL (the postings' fancy-index adds, ``reduceat``, the
partial sorts, the embedder's matrix products, FAISS search), so they overlap on two
cores; each leg computes exactly what it computes alone, so the fused ranking is the same
(``SearchConfig.concurrent_legs=False`` runs them one after the other).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..embeddings import Embedder, EmbedderConfig, create_embedder
from ..loader import LibraryData
from ..paths import default_cache_dir
from ..row_sequence import RunColumn
from .backend import LOCAL, SearchBackend, open_backend, parse_search_backend
from .chunks import (
    Chunk,
    ChunkMemo,
    IncidentChunks,
    chunk_digests,
    chunk_ids,
    chunk_incident_ids,
    chunk_texts,
    library_chunks,
)
from .dense import DEFAULT_HNSW_THRESHOLD, DEFAULT_IVF_THRESHOLD, ProgressFn
from .fusion import DEFAULT_ALPHA, FusionMethod, fuse
from .layered import DenseSnapshot, carry
from .lexical import LexicalIndex, Postings
from .lexical_store import cached_lexical_index, save_lexical_index
from .row_keys import RowKeys
from .store import BuildReport, LoadedIndex, ensure_index, rows_digest, store_dir

#: Incidents taken from each ranking before fusion: chosen by hand, not tuned (the fused list can hold
#: up to twice this many incidents, enough for ``requests.MAX_K``).
CANDIDATE_DEPTH = 50
#: Approximate (HNSW) dense search fetches chunks, not incidents: ``max(DENSE_FETCH_MIN, depth × DENSE_FETCH_PER_INCIDENT)``
#: chunks first.  The bundled library has 11 chunks per incident on average (25 at most), so 30 per
#: wanted incident usually yields ``depth`` distinct incidents in one FAISS call; when it does not, the
#: fetch grows ``DENSE_FETCH_GROWTH`` times until it does or covers the index.  Floor and growth chosen by hand.
DENSE_FETCH_MIN = 200
DENSE_FETCH_PER_INCIDENT = 30
DENSE_FETCH_GROWTH = 4
#: Worker threads an engine keeps for the BM25 leg of hybrid queries: one, so that a query uses at most two
#: cores (the worker and the calling thread, which embeds the query on one BLAS thread and runs the dense leg),
#: the size of the machine the targets are set on. While the worker is busy with another query's leg, a query
#: runs its legs one after the other in its own thread rather than queue behind it.
LEG_WORKERS = 1


class SearchMode(str, Enum):
    lexical = "lexical"
    dense = "dense"
    hybrid = "hybrid"


class SearchConfig(BaseModel):
    """How search is built: embedder, fusion, index thresholds and the cache location."""

    model_config = ConfigDict(frozen=True)

    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    fusion: FusionMethod = FusionMethod.weighted
    alpha: float = Field(default=DEFAULT_ALPHA, ge=0.0, le=1.0)
    hnsw_threshold: int = Field(default=DEFAULT_HNSW_THRESHOLD, ge=1)
    ivf_threshold: int = Field(default=DEFAULT_IVF_THRESHOLD, ge=1,
                               description="Vectors at which the dense index switches from HNSW to an inverted file.")
    cache_dir: Path | None = None
    candidate_depth: int = Field(default=CANDIDATE_DEPTH, ge=1, description="Incidents taken from each ranking before fusion.")
    backend: str = Field(default=LOCAL, description="Where ranking runs: local (default), milvus:PATH (embedded) "
                         "or milvus:http(s)://HOST:PORT (a Milvus server); see incidentlib.search.backend.")
    concurrent_legs: bool = Field(default=True, description="Run a hybrid query's BM25 leg on a worker thread while the "
                                  "query is embedded and the dense leg runs (local backend only); same results either way.")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        return parse_search_backend(value)


class IndexStats(BaseModel):
    """What the search indexes hold, and which dense index the library's size chose."""

    embedder: str
    chunks: int
    incidents: int
    dense_kind: str = Field(description="flat (exact numpy search), hnsw (FAISS HNSW) or ivf (FAISS inverted file, 8-bit "
                            "codes, exact re-ranking)")
    dense_index: str = Field(description="The dense index and its parameters, in words.")
    hnsw_threshold: int = Field(description="Vectors at which the dense index switches from exact to HNSW.")
    ivf_threshold: int = Field(description="Vectors at which the dense index switches from HNSW to an inverted file.")
    vectors_mb: float = Field(description="Size of the float32 vectors, held once (by the index; memory-mapped from disk for ivf).")
    dense_path: str
    dense_rows: int = Field(description="Rows of the dense index: one per chunk, plus the dead ones.")
    dense_dead_rows: int = Field(description="Rows of edited or removed chunks that an HNSW graph or inverted file keeps, "
                                 "matching nothing, until the index is built again (at most a quarter of its rows).")
    lexical_terms: int
    lexical_postings: int = Field(description="(term, chunk) pairs in the BM25 index.")
    lexical_mb: float
    lexical_source: str = Field(description="loaded (from the cache), updated (from the index before a change: "
                                "only new chunks tokenized) or built (tokenized now).")


@dataclass(frozen=True)
class _DenseState:
    """One dense index with its row maps, replaced as a whole (a request reads one consistent state).

    ``row_to_chunk[row]`` is the chunk position of an index row (-1 for a dead row of a carried index),
    ``chunk_to_row[chunk]`` the row of a chunk; ``identity`` when rows are the chunks in order;
    ``keys`` the key of each row when known (carried: :mod:`.row_keys`), ``persisted`` False until compacted.
    """

    loaded: LoadedIndex
    row_to_chunk: np.ndarray
    chunk_to_row: np.ndarray
    identity: bool
    keys: RowKeys | None
    persisted: bool


@dataclass(frozen=True)
class Hit:
    """One ranked incident with the chunk that earned its score."""

    incident_id: str
    score: float
    chunk: int  # index into SearchEngine.chunks
    lexical_rank: int | None = None
    dense_rank: int | None = None


class SearchEngine:
    def __init__(self, data: LibraryData, config: SearchConfig | None = None, embedder: Embedder | None = None,
                 previous_lexical: tuple[Sequence[str], Postings] | None = None,
                 previous_dense: DenseSnapshot | None = None, chunk_memo: ChunkMemo | None = None) -> None:
        """``previous_lexical`` / ``previous_dense``: the BM25 postings (with chunk texts) and the dense index of
        the engine this one replaces after a change to a live library (:meth:`lexical_snapshot`,
        :meth:`dense_snapshot`); the BM25 index is updated to this corpus instead of rebuilt (see
        :func:`.lexical.update_postings`), the dense one carried (see :mod:`.layered`) until :meth:`compact`.
        ``chunk_memo``: the incidents' chunks kept across engines (see :func:`.chunks.library_chunks`)."""
        self._chunk_memo = chunk_memo
        self.data = data
        self._previous_lexical = previous_lexical
        self._previous_dense = previous_dense
        self.config = config or SearchConfig()
        self._given_embedder = embedder
        self.last_build: BuildReport | None = None
        self._state: _DenseState | None = None
        #: ``"loaded"``, ``"updated"`` or ``"built"`` once the lexical index exists (``incidentlib index --stats`` shows it).
        self.lexical_source: str | None = None
        self._lexical_unsaved = False  # updated after a change and not saved yet (see :meth:`compact`)
        self._legs: ThreadPoolExecutor | None = None  # started by the first hybrid query that runs its legs concurrently
        self._legs_lock = threading.Lock()
        self._legs_free = threading.BoundedSemaphore(LEG_WORKERS)  # held while a leg is queued or running
        self._closed = False

    def close(self) -> None:
        """Stop the worker thread of the hybrid legs (waits for a leg in progress). The engine still answers
        afterwards, with the legs one after the other. Called when a library replaces this engine."""
        with self._legs_lock:
            self._closed = True
            legs, self._legs = self._legs, None
        if legs is not None:
            legs.shutdown(wait=True)

    # ---- corpus ------------------------------------------------------------
    @cached_property
    def chunks(self) -> Sequence[Chunk]:
        given = self.data.chunks
        if given is not None:  # from the start snapshot, cut from these very records: no record need be read
            if isinstance(given, IncidentChunks) and list(given) == list(self.data.incidents):
                return given.table  # the snapshot's columns, in this order already
            return list(itertools.chain.from_iterable(given[incident_id] for incident_id in self.data.incidents))
        return library_chunks(self.data.incidents.values(), self.data.vocab, self._chunk_memo)

    @cached_property
    def _incident_ids(self) -> list[str]:
        return list(self.data.incidents)

    @cached_property
    def _incident_position(self) -> dict[str, int]:
        return {incident_id: i for i, incident_id in enumerate(self._incident_ids)}

    @cached_property
    def _chunk_incident(self) -> np.ndarray:
        owners = chunk_incident_ids(self.chunks)
        if isinstance(owners, RunColumn) and owners.names == self._incident_ids:  # the snapshot's table, in this order
            return owners.positions()
        position = self._incident_position
        return np.fromiter(map(position.__getitem__, owners), dtype=np.int64, count=len(self.chunks))

    @cached_property
    def _incident_chunks(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """Chunk positions grouped by incident (ascending within one), each incident's offset into them,
        and whether the chunks already come grouped (then the grouping is the identity)."""
        counts = np.bincount(self._chunk_incident, minlength=len(self._incident_ids))
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        grouped = bool(np.all(np.diff(self._chunk_incident) >= 0)) if len(self._chunk_incident) else True
        order = np.arange(len(self._chunk_incident)) if grouped else np.argsort(self._chunk_incident, kind="stable")
        return order, offsets, grouped

    @cached_property
    def _reduce_at(self) -> tuple[np.ndarray, np.ndarray]:
        """The incidents that have chunks and where each one's run starts in the grouped chunks: the same for every
        query, so computed once (``np.maximum.reduceat`` over these starts gives each such incident's best score)."""
        _, offsets, _ = self._incident_chunks
        present = np.flatnonzero(np.diff(offsets))
        return present, offsets[present]

    @cached_property
    def lexical(self) -> LexicalIndex:
        """The BM25 index, loaded from the cache when this exact text was indexed before (see :mod:`.lexical_store`)."""
        # an index updated after a live write is saved by :meth:`compact`, once writes stop: writing its arrays
        # (1.1 GB at 100k incidents) was about 5 of a write's 10-17 s there (docs/benchmarks.md)
        index, self.lexical_source = cached_lexical_index(chunk_texts(self.chunks), self.cache_dir,
                                                          self._previous_lexical, texts_digest=self.chunks_digest,
                                                          keys=chunk_digests(self.chunks), save_update=False)
        self._previous_lexical = None  # not held past its use
        self._lexical_unsaved = self.lexical_source == "updated"
        return index

    @cached_property
    def chunks_digest(self) -> str:
        """:func:`~.store.rows_digest` of the chunks (ids and text digests, in order): what both persisted indexes
        are matched by, computed once."""
        return rows_digest(chunk_ids(self.chunks), chunk_digests(self.chunks))

    def lexical_snapshot(self) -> tuple[Sequence[str], Postings] | None:
        """The chunk digests (which stand for their texts in :func:`.lexical.update_postings`) and BM25 postings of
        this engine when its lexical index is built; else the ones it was given to update from, unused (None if
        none): the next engine can update from those."""
        if "lexical" not in self.__dict__:  # a cached_property not computed yet
            return self._previous_lexical
        return chunk_digests(self.chunks), self.lexical.postings

    # ---- dense ---------------------------------------------------------------
    @cached_property
    def embedder(self) -> Embedder:
        """The embedder given to the constructor, else the one ``config.embedder`` names."""
        return self._given_embedder or create_embedder(self.config.embedder)

    def prepare_embedder(self) -> None:
        """Have the embedder, when this engine has made it, load what its later queries need now (its ``prepare``,
        when it has one: use-m3's dict tokenizer): for a server, before it listens."""
        prepare = getattr(self.__dict__.get("embedder"), "prepare", None)
        if callable(prepare):
            prepare()

    @property
    def cache_dir(self) -> Path:
        return self.config.cache_dir or default_cache_dir()

    def build(self, progress: ProgressFn | None = None, rebuild: bool = False) -> BuildReport:
        """Make sure the dense index is fresh (reuse, extend or rebuild), then that the ranking backend holds
        this corpus (fills a Milvus collection when it has none for this content), and return what was done.
        ``rebuild``: build the dense index again from the vectors it holds (:func:`.store.ensure_index`)."""
        state = self._state
        if rebuild:
            self.save_lexical()
            loaded, report = self._ensure(progress, self.dense_snapshot() if self.dense_carried else None, rebuild=True)
            self._state = self._new_state(loaded, None, persisted=True)
        elif state is not None and not state.persisted:
            compacted = self.compact(progress)
            assert compacted is not None
            report = compacted
        else:
            loaded, report = self._ensure(progress)
            self._state = self._new_state(loaded, None, persisted=True)
        self.backend.prepare(progress)
        return report

    @cached_property
    def backend(self) -> SearchBackend:
        """The ranking backend ``config.backend`` names (see :mod:`.backend`)."""
        return open_backend(self, self.config.backend)

    def chunk_vectors(self) -> np.ndarray:
        """The dense vector of every chunk, in chunk order (one row per :attr:`chunks` entry)."""
        return self.chunk_vector_block(0, len(self.chunks))

    def chunk_vector_block(self, start: int, end: int) -> np.ndarray:
        """The dense vectors of chunks ``start..end`` (chunk order), gathered from the index's rows: a block at a time
        for a reader of every vector (a backend filling its collection), where :meth:`chunk_vectors` of a build whose
        rows are not the chunks in order gathers them all at once (the whole 27.5 GB matrix at 1M incidents)."""
        state = self._dense_state
        vectors = state.loaded.vectors
        block: np.ndarray = vectors[start:end] if state.identity else vectors[state.chunk_to_row[start:end]]
        return block

    def incident_position(self, incident_id: str) -> int:
        """The incident's place in the library's order (ties in a ranking go to the earlier one)."""
        return self._incident_position[incident_id]

    def incident_rows(self, incident_id: str) -> list[int]:
        """The positions of the incident's own chunks, in the order they were made (per language: title, body,
        detail, concepts; then the signals)."""
        order, offsets, _ = self._incident_chunks
        position = self._incident_position[incident_id]
        return sorted(int(row) for row in order[offsets[position]:offsets[position + 1]].tolist())

    def title_chunk(self, incident_id: str, lang: str) -> int:
        """The position of the incident's ``title`` chunk in ``lang``; ``KeyError`` when it has none.  Found among the
        incident's own chunks (a dozen or so), not through a map of every title chunk: building that took 0.2 s of a
        first answer at 100k incidents."""
        order, offsets, _ = self._incident_chunks
        position = self._incident_position[incident_id]
        for row in order[offsets[position]:offsets[position + 1]].tolist():
            chunk = self.chunks[row]
            if chunk.kind == "title" and chunk.lang == lang:
                return int(row)
        raise KeyError((incident_id, lang))

    def _ensure(self, progress: ProgressFn | None, donor: DenseSnapshot | None = None,
                rebuild: bool = False) -> tuple[LoadedIndex, BuildReport]:
        folder = store_dir(self.cache_dir, self.data.content_hash, self.embedder)
        loaded, report = ensure_index(
            self.chunks, self.data.content_hash, self.embedder, folder, hnsw_threshold=self.config.hnsw_threshold,
            ivf_threshold=self.config.ivf_threshold, progress=progress, library=str(Path(self.data.root).resolve()),
            memory_donor=None if donor is None else (donor.loaded.index, donor.keys, donor.live), chunks_digest=self.chunks_digest,
            rebuild=rebuild,
        )
        self.last_build = report
        return loaded, report

    def _new_state(self, loaded: LoadedIndex, keys: RowKeys | None, persisted: bool) -> _DenseState:
        if loaded.rows_are_chunks and len(loaded.chunk_ids) == len(self.chunks):  # loaded for these very chunks
            rows = np.arange(len(self.chunks), dtype=np.int64)
            return _DenseState(loaded, rows, rows.copy(), True, keys, persisted)
        if loaded.row_chunks is not None:  # the store matched the rows to these chunks (-1: a dead row)
            row_to_chunk = loaded.row_chunks
            live = np.flatnonzero(row_to_chunk >= 0)
            chunk_to_row = np.full(len(self.chunks), -1, dtype=np.int64)
            chunk_to_row[row_to_chunk[live]] = live
            return _DenseState(loaded, row_to_chunk, chunk_to_row, False, keys, persisted)
        position = {chunk_id: i for i, chunk_id in enumerate(chunk_ids(self.chunks))}
        row_to_chunk = np.fromiter((position.get(chunk_id, -1) if chunk_id else -1 for chunk_id in loaded.chunk_ids),
                                   dtype=np.int64, count=len(loaded.chunk_ids))
        live = np.flatnonzero(row_to_chunk >= 0)
        chunk_to_row = np.empty(len(self.chunks), dtype=np.int64)
        chunk_to_row[row_to_chunk[live]] = live
        identity = len(row_to_chunk) == len(self.chunks) and bool(np.array_equal(row_to_chunk, np.arange(len(row_to_chunk))))
        return _DenseState(loaded, row_to_chunk, chunk_to_row, identity, keys, persisted)

    @property
    def _dense_state(self) -> _DenseState:
        """The dense index and its row maps: carried from the previous engine after a change, else loaded
        (or built without progress) on first use."""
        state = self._state
        if state is None:
            previous, self._previous_dense = self._previous_dense, None  # not held past its use
            carried = None if previous is None else carry(previous, self.chunks, self.data.content_hash, self.embedder)
            if carried is not None:
                loaded, keys, self.last_build = carried
                state = self._new_state(loaded, keys, persisted=False)
            elif previous is not None:  # too many dead rows to carry: compact now, from the vectors in memory
                state = self._new_state(self._ensure(None, previous)[0], None, persisted=True)
            else:
                state = self._new_state(self._ensure(None)[0], None, persisted=True)
            self._state = state
        return state

    @property
    def _row_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """Index row -> chunk position (-1: a dead row), and chunk position -> index row."""
        state = self._dense_state
        return state.row_to_chunk, state.chunk_to_row

    def use_index(self, loaded: LoadedIndex) -> None:
        """Serve ``loaded`` (rows named by ``loaded.chunk_ids``) as this engine's dense index: for benchmarks
        that build an index themselves."""
        self._state = self._new_state(loaded, None, persisted=True)

    @property
    def dense(self) -> LoadedIndex:
        """The dense index, loaded (or built without progress, or carried after a change) on first use."""
        return self._dense_state.loaded

    @property
    def dense_carried(self) -> bool:
        """True when the dense index is a carried one (dead rows, appended rows, not saved)."""
        state = self._state
        return state is not None and not state.persisted

    @property
    def needs_compaction(self) -> bool:
        """True when the dense index is a carried one (dead rows, appended rows, not saved) or the BM25 index was
        updated and not saved: :meth:`compact` tidies them."""
        return self.dense_carried or self._lexical_unsaved

    def dense_snapshot(self) -> DenseSnapshot | None:
        """This engine's dense index and each row's ``(chunk id, digest)``, when it has one (for the next engine)."""
        state = self._state
        if state is None:
            return self._previous_dense  # not built since the last change: the one it would have carried
        live = state.row_to_chunk >= 0
        if state.keys is not None:
            return DenseSnapshot(state.loaded, state.keys, live)
        # each row's key is its chunk's (the row maps name it): made from the chunk columns, no object per row
        return DenseSnapshot(state.loaded, RowKeys.of_chunks(self.chunks).take(np.maximum(state.row_to_chunk, 0)), live)

    def save_lexical(self) -> None:
        """Save the BM25 index a change updated, when not saved yet (a live write leaves that to compaction, or to
        the server's shutdown)."""
        if self._lexical_unsaved:
            save_lexical_index(chunk_texts(self.chunks), self.cache_dir, self.lexical.postings,
                               texts_digest=self.chunks_digest)
            self._lexical_unsaved = False

    def compact(self, progress: ProgressFn | None = None) -> BuildReport | None:
        """Save the BM25 index updated since the last change, and persist the carried dense index for this content
        (nothing is re-embedded; another process may already have written it, then it is loaded) and swap it in;
        the dense build's report, None when the dense index had nothing to do."""
        self.save_lexical()
        state = self._state
        if state is None or state.persisted:
            return None
        snapshot = self.dense_snapshot()
        assert snapshot is not None
        loaded, report = self._ensure(progress, snapshot)
        self._state = self._new_state(loaded, None, persisted=True)
        return report

    def stats(self) -> IndexStats:
        """Sizes and kinds of the built indexes (builds or loads them first)."""
        dense = self.dense
        postings = self.lexical.postings
        lexical_bytes = postings.indptr.nbytes + postings.indices.nbytes + postings.data.nbytes
        return IndexStats(
            embedder=dense.meta.embedder, chunks=len(self.chunks), incidents=len(self._incident_ids),
            dense_kind=dense.index.kind, dense_index=dense.index.describe(), hnsw_threshold=self.config.hnsw_threshold,
            ivf_threshold=self.config.ivf_threshold, vectors_mb=round(dense.vectors.nbytes / 2**20, 1), dense_path=self.last_build.path if self.last_build else "",
            dense_rows=len(dense.index), dense_dead_rows=int(np.count_nonzero(self._dense_state.row_to_chunk < 0)),
            lexical_terms=len(postings.vocabulary), lexical_postings=len(postings.indices),
            lexical_mb=round(lexical_bytes / 2**20, 1), lexical_source=self.lexical_source or "",
        )

    # ---- ranking -------------------------------------------------------------
    def _allowed_incidents(self, allowed: set[str] | None) -> np.ndarray | None:
        if allowed is None:
            return None
        return np.fromiter((incident_id in allowed for incident_id in self._incident_ids), dtype=bool, count=len(self._incident_ids))

    def _allowed_chunks(self, allowed: set[str] | None) -> np.ndarray | None:
        mask = self._allowed_incidents(allowed)
        return None if mask is None else np.flatnonzero(mask[self._chunk_incident])

    def _top_incidents(self, scores: np.ndarray, depth: int | None, allowed: set[str] | None,
                       positive: bool, present_best: np.ndarray | None = None) -> list[tuple[str, float, int]]:
        """Incidents ranked by their best chunk's score (``max`` over the incident's chunks), best first.

        ``scores`` has one entry per chunk.  Only incidents with a positive best score count when
        ``positive`` (BM25: no shared term is no match).  Ties rank the earlier incident first, and
        an incident's best chunk is its earliest chunk with the top score.  ``present_best``, when
        the caller reduced the scores already, is that maximum for the incidents of :attr:`_reduce_at`.
        """
        order, _, grouped = self._incident_chunks
        present, starts = self._reduce_at
        best = np.full(len(self._incident_ids), -np.inf, dtype=np.float32)
        if present_best is not None:
            best[present] = present_best
        elif len(present):
            grouped_scores = scores if grouped else scores[order]
            best[present] = np.maximum.reduceat(grouped_scores, starts)
        mask = self._allowed_incidents(allowed)
        if mask is not None:
            best[~mask] = -np.inf
        candidates = np.flatnonzero(best > 0) if positive else np.flatnonzero(np.isfinite(best))
        if depth is not None and len(candidates) > depth:
            values = best[candidates]
            cut = np.partition(values, len(values) - depth)[len(values) - depth]  # the depth-th largest
            candidates = candidates[values >= cut]  # ties at the cut stay, the sort below settles them
        ranked = candidates[np.lexsort((candidates, -best[candidates]))]
        if depth is not None:
            ranked = ranked[:depth]
        ids = self._incident_ids
        chunks = self._best_chunks(ranked, scores).tolist()
        return [(ids[i], s, c) for i, s, c in zip(ranked.tolist(), best[ranked].tolist(), chunks, strict=True)]

    def _best_chunks(self, incidents: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """For each of ``incidents`` (each with at least one chunk), its earliest chunk with its top score: what
        ``argmax`` over each incident's chunks gives, for all of them in a few array operations instead of a
        Python loop with one ``argmax`` per incident."""
        order, offsets, _ = self._incident_chunks
        if not len(incidents):
            return np.zeros(0, dtype=np.int64)
        starts = offsets[incidents]
        lengths = offsets[incidents + 1] - starts
        # positions into ``order`` of the incidents' chunks, one incident's run after another
        run_starts = np.cumsum(lengths) - lengths
        positions = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - run_starts, lengths)
        chunks = order[positions]
        values = scores[chunks]
        flagged = np.flatnonzero(values == np.repeat(np.maximum.reduceat(values, run_starts), lengths))
        run_of = np.repeat(np.arange(len(incidents)), lengths)[flagged]
        first = np.ones(len(flagged), dtype=bool)
        first[1:] = run_of[1:] != run_of[:-1]  # the first flagged chunk of each run (runs ascend, chunks within too)
        result: np.ndarray = chunks[flagged[first]]
        return result

    def _aggregate(self, chunk_ids: np.ndarray, scores: np.ndarray, depth: int) -> list[tuple[str, float, int]]:
        """Best chunk per incident, the first ``depth`` incidents ordered by that chunk's score (for the chunks an
        approximate index returns; the cut comes before any Python object is made for a result)."""
        if len(chunk_ids) == 0:
            return []
        incidents = self._chunk_incident[chunk_ids]
        order = np.lexsort((-scores, incidents))  # by incident, best score first
        first = np.ones(len(order), dtype=bool)
        first[1:] = incidents[order][1:] != incidents[order][:-1]
        best = order[first]
        ranked = best[np.argsort(-scores[best], kind="stable")][:depth]
        ids = self._incident_ids
        return [(ids[i], s, c) for i, s, c in
                zip(incidents[ranked].tolist(), scores[ranked].tolist(), chunk_ids[ranked].tolist(), strict=True)]

    def rank_lexical(self, query: str, allowed: set[str] | None = None, depth: int | None = None) -> list[tuple[str, float, int]]:
        """Incidents by their best chunk's BM25 score (positive only), ranked by the configured backend."""
        return self.backend.rank_lexical(query, allowed, depth)

    def rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None = None, depth: int = CANDIDATE_DEPTH) -> list[tuple[str, float, int]]:
        """Incidents by their best chunk's inner product with ``vector``, ranked by the configured backend."""
        return self.backend.rank_dense_vector(vector, allowed, depth)

    def local_rank_lexical(self, query: str, allowed: set[str] | None = None, depth: int | None = None) -> list[tuple[str, float, int]]:
        _, _, grouped = self._incident_chunks
        if not grouped:
            return self._top_incidents(self.lexical.scores(query), depth, allowed, positive=True)
        # chunks grouped by incident (the usual order): each incident's best score is taken while its block of
        # scores is in the cache, and only for the incidents that can be among the depth best (LexicalIndex.run_scores)
        present, starts = self._reduce_at
        mask = self._allowed_incidents(allowed)
        scores, present_best = self.lexical.run_scores(query, starts, depth, None if mask is None else mask[present])
        return self._top_incidents(scores, depth, allowed, positive=True, present_best=present_best)

    def local_rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None = None,
                                depth: int = CANDIDATE_DEPTH) -> list[tuple[str, float, int]]:
        state = self._dense_state
        index = state.loaded.index
        row_scores = index.scores(vector)
        if row_scores is not None:  # exact: every chunk is scored, so the ranking is exact too
            scores = row_scores if state.identity else row_scores[state.chunk_to_row]
            return self._top_incidents(scores, depth, allowed, positive=False)
        row_to_chunk, chunk_to_row = state.row_to_chunk, state.chunk_to_row
        chunks = self._allowed_chunks(allowed)
        rows = None if chunks is None else chunk_to_row[chunks]
        available = len(index) if rows is None else len(rows)
        fetch = min(available, max(DENSE_FETCH_MIN, depth * DENSE_FETCH_PER_INCIDENT))
        while True:
            found, ids = index.search(vector, fetch, allowed=rows)
            chunk_of = row_to_chunk[ids.astype(np.int64)]
            live = chunk_of >= 0  # a carried index's dead rows rank nowhere
            ranked = self._aggregate(chunk_of[live], found.astype(np.float32)[live], depth)
            if len(ranked) >= depth or fetch >= available:
                return ranked
            fetch = min(available, fetch * DENSE_FETCH_GROWTH)

    def rank_dense(self, query: str, allowed: set[str] | None = None, depth: int = CANDIDATE_DEPTH) -> list[tuple[str, float, int]]:
        vector = self.embedder.encode_queries([query])[0]
        return self.rank_dense_vector(vector, allowed, depth)

    def search(self, query: str, k: int = 10, mode: SearchMode = SearchMode.hybrid, allowed: set[str] | None = None,
               fusion: FusionMethod | None = None) -> list[Hit]:
        depth = max(k, self.config.candidate_depth)
        if mode is SearchMode.lexical:
            return [Hit(i, s, c, lexical_rank=r) for r, (i, s, c) in enumerate(self.rank_lexical(query, allowed, k), 1)]
        if mode is SearchMode.dense:
            return [Hit(i, s, c, dense_rank=r) for r, (i, s, c) in enumerate(self.rank_dense(query, allowed, k), 1)]
        lexical_leg = self._start_lexical_leg(query, allowed, depth)
        if lexical_leg is None:
            lexical = self.rank_lexical(query, allowed, depth)
            dense = self.rank_dense(query, allowed, depth)
        else:
            dense = self.rank_dense(query, allowed, depth)
            lexical = lexical_leg.result()
        return self.fuse_rankings(lexical, dense, k, fusion)

    def _leg_pool(self) -> ThreadPoolExecutor | None:
        """The worker pool for hybrid legs, started on first use; None when legs run one after the other."""
        if not self.config.concurrent_legs or self.config.backend != LOCAL:
            return None  # a remote backend's client is not assumed to take two calls at once
        with self._legs_lock:
            if self._closed:
                return None
            if self._legs is None:
                self._legs = ThreadPoolExecutor(max_workers=LEG_WORKERS, thread_name_prefix="incidentlib-search-leg")
            return self._legs

    def _start_lexical_leg(self, query: str, allowed: set[str] | None, depth: int) -> Future[list[tuple[str, float, int]]] | None:
        """The BM25 leg submitted to the worker, or None when it is to run in the calling thread (concurrent legs
        off, a remote backend, the engine closed, or the worker busy with another query)."""
        pool = self._leg_pool()
        if pool is None or not self._legs_free.acquire(blocking=False):
            return None
        # lazily built parts both legs read: built here, once, not by two threads at the same time
        _ = self.backend, self._incident_chunks, self._chunk_incident, self._reduce_at

        def leg() -> list[tuple[str, float, int]]:
            try:
                return self.rank_lexical(query, allowed, depth)
            finally:
                self._legs_free.release()

        try:
            return pool.submit(leg)
        except RuntimeError:  # shut down by close() since _leg_pool returned it
            self._legs_free.release()
            return None

    def fuse_rankings(self, lexical: list[tuple[str, float, int]], dense: list[tuple[str, float, int]], k: int,
                      fusion: FusionMethod | None = None) -> list[Hit]:
        method = fusion or self.config.fusion
        lex_info = {i: (rank, chunk) for rank, (i, _, chunk) in enumerate(lexical, 1)}
        den_info = {i: (rank, chunk) for rank, (i, _, chunk) in enumerate(dense, 1)}
        fused = fuse(method, [(i, s) for i, s, _ in lexical], [(i, s) for i, s, _ in dense], self.config.alpha)
        hits = []
        for incident_id, score in fused[:k]:
            lex, den = lex_info.get(incident_id), den_info.get(incident_id)
            # the lexical chunk explains a match in words the user typed; prefer it when there is one
            chunk = lex[1] if lex else den[1]  # type: ignore[index]
            hits.append(Hit(incident_id, score, chunk, lexical_rank=lex[0] if lex else None, dense_rank=den[0] if den else None))
        return hits

    def incident_vector(self, incident_id: str, kinds: Iterable[str] = ("title", "body")) -> np.ndarray:
        """The normalised mean of an incident's chunk vectors (for "more like this")."""
        wanted = set(kinds)
        state = self._dense_state
        order, offsets, _ = self._incident_chunks
        position = self._incident_position[incident_id]
        own = order[offsets[position] : offsets[position + 1]]
        rows = [state.chunk_to_row[i] for i in own if self.chunks[i].kind in wanted]
        vector = state.loaded.vectors[rows].mean(axis=0)
        norm = float(np.linalg.norm(vector)) or 1.0
        result: np.ndarray = (vector / norm).astype(np.float32)
        return result
