"""Dense vector indexes over L2-normalised embeddings (inner product = cosine similarity).

Three backends behind one small protocol, chosen by size (:func:`create`):

- ``flat`` (:mod:`.exact`): exact search by one float32 matrix-vector product in numpy; the
  index *is* the vector matrix, so vectors are held once.
- ``hnsw`` (:mod:`.hnsw`): a FAISS HNSW graph, sub-linear per query; its vectors are read
  from FAISS's own storage, so they too are held once.
- ``ivf`` (:mod:`.ivf`): a FAISS inverted file over 8-bit codes with exact re-ranking from
  float32 vectors kept on disk (memory-mapped): builds in about a minute and holds a quarter
  of the memory where an HNSW graph would take many minutes and every vector in memory.

``bench/bench_search.py`` measures where the switch pays off (see docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

#: Vectors at which the index switches from exact numpy search to HNSW.  Exact search costs one pass
#: over the matrix: docs/benchmarks.md measured 3.6 ms p50 at 110k chunks and 74 ms at 1.1M, so 200k
#: keeps it under ~8 ms (half the 15 ms hybrid budget) with exact results; above it HNSW answers in
#: about a millisecond at a recall of ~0.95.
DEFAULT_HNSW_THRESHOLD = 200_000
#: Vectors at which HNSW gives way to the inverted file (:mod:`.ivf`).  HNSW builds at roughly 10k vectors/s
#: on two cores (docs/benchmarks.md: 110k in 11 s on an idle machine), so from about a million vectors its build
#: passes the 60 s budget by minutes, and its float32 vectors (2 GB at 1M × 512) alone approach the serving
#: memory budget of a 100k-incident library; the inverted file builds from a sample in about a minute.
DEFAULT_IVF_THRESHOLD = 1_000_000

#: ``progress(done, total)``: how far a long step (embedding, adding rows to an index) has come.
ProgressFn = Callable[[int, int], None]


class VectorIndex(Protocol):
    """Top-k inner-product search over ``len(self)`` rows of ``vectors``."""

    kind: str

    @property
    def vectors(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def add(self, vectors: np.ndarray) -> VectorIndex: ...

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def search_batch(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of each row of ``queries`` in one call: (scores, row ids), each (queries × k), best first;
        missing hits have id −1 and score −inf."""
        ...

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Float32 rows ``ids`` (any order) as a new (len(ids) × dim) matrix: a few rows, never the whole index."""
        ...

    def scores(self, query: np.ndarray) -> np.ndarray | None: ...

    def save(self, folder: Path) -> list[str]: ...

    def describe(self) -> str: ...


def kind_for(size: int, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD, ivf_threshold: int = DEFAULT_IVF_THRESHOLD) -> str:
    """``"ivf"`` at ``ivf_threshold`` vectors or more, else ``"hnsw"`` at ``hnsw_threshold`` or more, else ``"flat"``."""
    if size >= ivf_threshold:
        return "ivf"
    return "hnsw" if size >= hnsw_threshold else "flat"


def create(vectors: np.ndarray, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
           ivf_threshold: int = DEFAULT_IVF_THRESHOLD, progress: ProgressFn | None = None) -> VectorIndex:
    """An index over ``vectors`` of the kind :func:`kind_for` picks for their number; ``progress(rows added, rows)``
    is reported by the inverted file's build (the one that takes minutes)."""
    from .exact import ExactIndex

    kind = kind_for(len(vectors), hnsw_threshold, ivf_threshold)
    if kind == "ivf":
        from .ivf import IvfIndex

        return IvfIndex.build(vectors, progress)
    if kind == "hnsw":
        from .hnsw import HnswIndex

        return HnswIndex.build(vectors)
    return ExactIndex(vectors)


def files_for(kind: str) -> tuple[str, ...]:
    """The files a saved index of ``kind`` consists of (besides the row list)."""
    return {"hnsw": ("index.faiss",), "ivf": ("ivf.faiss", "vectors.npy")}.get(kind, ("vectors.npy",))


def vectors_on_disk(kind: str) -> bool:
    """Whether a loaded index of ``kind`` reads its float32 rows from a memory-mapped file (finite when written)."""
    return kind == "ivf"


def load(folder: Path, kind: str) -> VectorIndex:
    """Read an index of ``kind`` saved by :meth:`VectorIndex.save` (raises ``ValueError``/``OSError``/``RuntimeError``)."""
    if kind == "hnsw":
        from .hnsw import HnswIndex

        return HnswIndex.load(folder)
    if kind == "ivf":
        from .ivf import IvfIndex

        return IvfIndex.load(folder)
    if kind == "flat":
        from .exact import ExactIndex

        return ExactIndex.load(folder)
    raise ValueError(f"unknown index kind {kind!r}")


def empty_result() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)


def pad_batch(found: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-query (scores, ids) of :meth:`VectorIndex.search` as (queries × k) matrices, padded with −inf / −1."""
    scores = np.full((len(found), max(k, 0)), -np.inf, dtype=np.float32)
    ids = np.full((len(found), max(k, 0)), -1, dtype=np.int64)
    for i, (s, rows) in enumerate(found):
        scores[i, : len(s)] = s[:k]
        ids[i, : len(rows)] = rows[:k]
    return scores, ids
