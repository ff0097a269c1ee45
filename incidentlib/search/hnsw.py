"""Approximate inner-product search with a FAISS HNSW graph.

The vectors live once, inside FAISS's flat storage; :attr:`HnswIndex.vectors` is a numpy view
of that memory which keeps the index alive for as long as the view is referenced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faiss
import numpy as np

from .dense import VectorIndex, empty_result, pad_batch

INDEX_FILE = "index.faiss"
#: HNSW links per node (faiss's M).  32 is the common choice for ~500-dimensional vectors; not tuned here.
HNSW_M = 32
#: HNSW build breadth (faiss default 40): twice the default for a better graph at a build cost paid once;
#: chosen by hand, not tuned (docs/benchmarks.md measures recall with it: 0.95 recall@10 at 110k chunks).
EF_CONSTRUCTION = 80
#: HNSW search breadth (faiss default 16): wider means higher recall and slower queries; see docs/benchmarks.md.
EF_SEARCH = 128


class _Owner:
    """Exposes FAISS-owned memory to numpy while holding a reference to the index that owns it."""

    def __init__(self, index: Any, view: np.ndarray) -> None:
        self.index = index
        self.__array_interface__ = view.__array_interface__


class HnswIndex:
    kind = "hnsw"

    def __init__(self, index: Any) -> None:
        self._index = index
        index.hnsw.efSearch = EF_SEARCH

    @classmethod
    def build(cls, vectors: np.ndarray) -> HnswIndex:
        index = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = EF_CONSTRUCTION
        built = cls(index)
        built._add(vectors)
        return built

    @classmethod
    def load(cls, folder: Path) -> HnswIndex:
        index = faiss.read_index(str(folder / INDEX_FILE))  # already the concrete type; downcasting again would drop ownership
        if not isinstance(index, faiss.IndexHNSWFlat):
            raise ValueError(f"{INDEX_FILE} holds a {type(index).__name__}, not an HNSW flat index")
        return cls(index)

    @property
    def vectors(self) -> np.ndarray:
        storage: Any = faiss.downcast_index(self._index.storage)  # an IndexFlat; the stubs type it as the base Index
        total, dim = int(self._index.ntotal), int(self._index.d)
        if total == 0:
            return np.zeros((0, dim), dtype=np.float32)
        view = faiss.rev_swig_ptr(storage.get_xb(), total * dim).reshape(total, dim)
        return np.asarray(_Owner(self._index, view))

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def _add(self, vectors: np.ndarray) -> None:
        if len(vectors):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def add(self, vectors: np.ndarray) -> VectorIndex:
        self._add(vectors)
        return self

    def scores(self, query: np.ndarray) -> None:
        """HNSW does not score every row; callers use :meth:`search`."""

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (scores, row ids), best first; ``allowed`` restricts the rows before ranking."""
        total = len(self)
        if total == 0 or k <= 0:
            return empty_result()
        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        params = None
        if allowed is not None:
            if len(allowed) == 0:
                return empty_result()
            k = min(k, len(allowed))
            selector = faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(EF_SEARCH, k))  # type: ignore[attr-defined]  # missing from faiss stubs
        scores, ids = self._index.search(query, min(k, total), params=params)
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep].astype(np.int64)

    def search_batch(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Each query's top ``k`` from one FAISS call (its threads share the queries)."""
        queries = np.ascontiguousarray(np.asarray(queries, dtype=np.float32).reshape(-1, int(self._index.d)))
        k = min(k, len(self))
        if k <= 0 or not len(queries):
            return pad_batch([empty_result() for _ in range(len(queries))], max(k, 0))
        params = faiss.SearchParametersHNSW(efSearch=max(EF_SEARCH, k))  # type: ignore[attr-defined]  # missing from faiss stubs
        scores, ids = self._index.search(queries, k, params=params)
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return scores, ids.astype(np.int64)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows copied out of FAISS's storage (a view of it is indexed: nothing else is copied)."""
        return np.asarray(self.vectors[np.asarray(ids, dtype=np.int64)])

    def save(self, folder: Path) -> list[str]:
        faiss.write_index(self._index, str(folder / INDEX_FILE))
        return [INDEX_FILE]

    def describe(self) -> str:
        return f"HNSW (FAISS, M={HNSW_M}, efConstruction={EF_CONSTRUCTION}, efSearch={EF_SEARCH}) over {len(self):,} vectors"
