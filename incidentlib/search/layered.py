"""A dense index that follows a live library without rewriting it: an immutable base plus appended rows.

After a write the engine does not rebuild or re-save its vector index (at 100k incidents that
is gigabytes per write). It *carries* the previous one (:func:`carry`):

- rows of chunks that are gone or were edited become dead (their chunk id is ``""`` in
  ``LoadedIndex.chunk_ids``; the engine's row maps send them nowhere, so they never rank);
- new and edited chunks are embedded and appended to a small exact *delta* index;
- the base (exact matrix, HNSW graph or inverted file) is shared, never modified, so a request still
  running on the previous engine reads a consistent index.

A search asks the base and the delta and merges the two top lists (exact for the delta).
Compaction (``SearchEngine.compact``) later persists an index for the current content from these
vectors — nothing is re-embedded: an HNSW graph or inverted file on disk is extended with the
appended rows, an exact index written anew (:func:`.store.ensure_index`) — and swaps it in;
:data:`MAX_DEAD_SHARE` bounds how much dead weight a carry may leave before it compacts at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..embeddings import Embedder
from ..row_sequence import GatheredRows
from .chunks import Chunk, chunk_digests, chunk_ids, chunk_texts
from .dense import VectorIndex, empty_result
from .exact import ExactIndex
from .row_keys import RowKeys, match
from .store import EMBED_BATCH, BuildReport, LoadedIndex, embed_texts

#: A carry that would leave more than this share of the index's rows dead compacts instead: dead rows
#: cost memory and, in an HNSW graph, search effort (more fetched candidates fall away), and half is the
#: point where a rewrite holds fewer rows than the carried index. Chosen by that argument, not tuned.
MAX_DEAD_SHARE = 0.5



class LayeredIndex:
    """``base`` rows ``0…len(base)-1``, then ``delta`` rows; searches both, modifies neither."""

    def __init__(self, base: VectorIndex, delta: ExactIndex) -> None:
        self.base = base
        self.delta = delta
        self.kind = base.kind

    @cached_property
    def vectors(self) -> np.ndarray:
        """All rows as one matrix (a copy, made once: for the callers that read vectors directly)."""
        return np.vstack([self.base.vectors, self.delta.vectors])

    def __len__(self) -> int:
        return len(self.base) + len(self.delta)

    def add(self, vectors: np.ndarray) -> VectorIndex:
        return LayeredIndex(self.base, ExactIndex(np.vstack([self.delta.vectors, vectors])))

    def scores(self, query: np.ndarray) -> np.ndarray | None:
        base = self.base.scores(query)
        return None if base is None else np.concatenate([base, self.delta.scores(query)])

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of the base's and the delta's top ``k`` (row ids of the delta offset by ``len(base)``)."""
        offset = len(self.base)
        base_rows = delta_rows = None
        if allowed is not None:
            rows = np.asarray(allowed, dtype=np.int64)
            base_rows, delta_rows = rows[rows < offset], rows[rows >= offset] - offset
        found: list[tuple[np.ndarray, np.ndarray]] = []
        if base_rows is None or len(base_rows):
            found.append(self.base.search(query, k, allowed=base_rows))
        if len(self.delta) and (delta_rows is None or len(delta_rows)):
            scores, ids = self.delta.search(query, k, allowed=delta_rows)
            found.append((scores, ids + offset))
        if not found:
            return empty_result()
        scores = np.concatenate([s for s, _ in found])
        ids = np.concatenate([i for _, i in found])
        best = np.argsort(-scores, kind="stable")[:k]
        return scores[best].astype(np.float32), ids[best].astype(np.int64)

    def search_batch(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query, the top ``k`` of the base's and the delta's top ``k`` (one batch call to each)."""
        base_scores, base_ids = self.base.search_batch(queries, k)
        if not len(self.delta):
            return base_scores, base_ids
        delta_scores, delta_ids = self.delta.search_batch(queries, k)
        scores = np.hstack([base_scores, delta_scores])
        ids = np.hstack([base_ids, np.where(delta_ids >= 0, delta_ids + len(self.base), -1)])
        best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, best, axis=1), np.take_along_axis(ids, best, axis=1)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        offset = len(self.base)
        out = np.empty((len(ids), self.base.vectors.shape[1] if len(self.base) else self.delta.vectors.shape[1]), dtype=np.float32)
        low = ids < offset
        if low.any():
            out[low] = self.base.rows(ids[low])
        if (~low).any():
            out[~low] = self.delta.rows(ids[~low] - offset)
        return out

    def save(self, folder: Path) -> list[str]:
        raise NotImplementedError("a carried index is saved by compaction as one clean index, never as layers")

    def describe(self) -> str:
        return f"{self.base.describe()} + {len(self.delta):,} rows appended since the last compaction"


@dataclass(frozen=True)
class DenseSnapshot:
    """An engine's dense index and the key of each of its rows (:mod:`.row_keys`; ``live[row]`` False for a dead
    row, whose key means nothing): what the next engine carries."""

    loaded: LoadedIndex
    keys: RowKeys
    live: np.ndarray

    @property
    def dead(self) -> int:
        return int(len(self.live) - np.count_nonzero(self.live))


def carry(snapshot: DenseSnapshot, chunks: Sequence[Chunk], content_hash: str, embedder: Embedder,
          batch_size: int = EMBED_BATCH) -> tuple[LoadedIndex, RowKeys, BuildReport] | None:
    """The previous index turned into one for ``chunks``: stale rows dead, new chunks embedded and appended.

    Rows and chunks are matched by their keys in bulk (:func:`.row_keys.match`), and the result names each row's
    chunk position (``LoadedIndex.row_chunks``, -1 for a dead row), so nothing here makes an object per row: at 100k
    incidents the sets and lists of ``(id, digest)`` tuples this took were seconds of every write.

    None when that would leave more than :data:`MAX_DEAD_SHARE` of the rows dead (then compact instead).
    """
    started = time.perf_counter()
    wanted = RowKeys.of_chunks(chunks)
    live_rows = np.flatnonzero(snapshot.live)
    found = match(snapshot.keys.take(live_rows), wanted)
    row_of_chunk = np.where(found >= 0, live_rows[np.maximum(found, 0)], -1)
    kept = np.flatnonzero(row_of_chunk >= 0)
    missing = np.flatnonzero(row_of_chunk < 0)
    rows = len(snapshot.live)
    dead = rows - len(kept)  # chunk ids are unique, so no two chunks keep one row
    if dead > MAX_DEAD_SHARE * (rows + len(missing)):
        return None
    texts = chunk_texts(chunks)
    fresh = embed_texts([texts[p] for p in missing.tolist()], embedder, batch_size, None)
    index = snapshot.loaded.index
    grown = index.add(fresh) if isinstance(index, LayeredIndex) else LayeredIndex(index, ExactIndex(fresh))
    row_chunks = np.full(rows + len(missing), -1, dtype=np.int64)
    row_chunks[row_of_chunk[kept]] = kept
    row_chunks[rows:] = missing
    keys = RowKeys.concatenate([snapshot.keys, wanted.take(missing)])
    meta = snapshot.loaded.meta.model_copy(update={
        "content_hash": content_hash, "chunks": len(row_chunks), "build": "", "built_at": time.time(),
        "embedded_now": len(missing), "reused": len(kept), "checksums": {}, "rows_digest": "", "chunks_digest": ""})
    loaded = LoadedIndex(grown, GatheredRows(chunk_ids(chunks), row_chunks, fill=""), meta,
                         GatheredRows(chunk_digests(chunks), row_chunks, fill=""), row_chunks=row_chunks)
    report = BuildReport(action="carried", embedder=meta.embedder, chunks=len(chunks), embedded=len(missing),
                         reused=meta.reused, index_kind=meta.index_kind, path="",
                         seconds=round(time.perf_counter() - started, 3))
    return loaded, keys, report
