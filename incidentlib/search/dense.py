"""Dense vector indexes over normalised embeddings (FAISS, inner product).

A flat index is exact and fastest to build; above ``hnsw_threshold`` vectors an
HNSW graph answers queries in sub-linear time.  ``bench/bench_search.py``
measures where the switch pays off (see docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

DEFAULT_HNSW_THRESHOLD = 50_000
#: HNSW search breadth (faiss default 16): wider means higher recall and slower queries; see docs/benchmarks.md.
EF_SEARCH = 128


class FaissIndex:
    """Inner product over L2-normalised vectors, i.e. cosine similarity."""

    def __init__(self, index: faiss.Index, kind: str) -> None:
        self._index = index
        self.kind = kind

    @classmethod
    def create(cls, dim: int, expected_size: int, hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD) -> FaissIndex:
        if expected_size >= hnsw_threshold:
            index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = 80
            index.hnsw.efSearch = EF_SEARCH
            return cls(index, "hnsw")
        return cls(faiss.IndexFlatIP(dim), "flat")

    @classmethod
    def load(cls, path: Path) -> FaissIndex:
        index = faiss.read_index(str(path))
        kind = "hnsw" if isinstance(index, faiss.IndexHNSW) or "HNSW" in type(index).__name__ else "flat"
        if kind == "hnsw":
            faiss.downcast_index(index).hnsw.efSearch = EF_SEARCH  # type: ignore[attr-defined]  # faiss stubs type downcast_index as the base Index
        return cls(index, kind)

    @property
    def dim(self) -> int:
        return int(self._index.d)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        if len(vectors):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (scores, ids) for one query vector; ``allowed`` restricts ids before ranking."""
        total = len(self)
        if total == 0 or k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        params = None
        if allowed is not None:
            if len(allowed) == 0:
                return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
            k = min(k, len(allowed))
            selector = faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
            params = (faiss.SearchParametersHNSW(sel=selector, efSearch=max(EF_SEARCH, k))  # type: ignore[attr-defined]  # missing from faiss stubs
                      if self.kind == "hnsw" else faiss.SearchParameters(sel=selector))  # type: ignore[call-arg]  # stubs lack sel=
        k = min(k, total)
        scores, ids = self._index.search(query, k, params=params)
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep]

    def save(self, path: Path) -> None:
        faiss.write_index(self._index, str(path))
