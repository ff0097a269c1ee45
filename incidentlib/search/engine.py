"""Hybrid search over incident chunks: BM25, dense vectors, and their fusion.

Incident score from chunk scores: an incident scores as its best chunk (max
over its chunks), and the best chunk is reported as the reason it matched.
Filters restrict the chunks searched *before* ranking (a mask for BM25, an id
selector for FAISS), so a filtered query still returns ``k`` results when ``k``
incidents match the filter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..embeddings import Embedder, EmbedderConfig, create_embedder
from ..loader import LibraryData
from ..paths import default_cache_dir
from .chunks import Chunk, library_chunks
from .dense import DEFAULT_HNSW_THRESHOLD
from .fusion import DEFAULT_ALPHA, FusionMethod, fuse
from .lexical import LexicalIndex
from .store import BuildReport, LoadedIndex, ProgressFn, ensure_index, store_dir

#: Incidents taken from each ranking before fusion: chosen by hand, not tuned (the fused list can hold
#: up to twice this many incidents, enough for ``requests.MAX_K``).
CANDIDATE_DEPTH = 50
#: Dense search fetches chunks, not incidents: ``max(DENSE_FETCH_MIN, depth × DENSE_FETCH_PER_INCIDENT)``
#: chunks first.  The bundled library has 11 chunks per incident on average (25 at most), so 30 per
#: wanted incident usually yields ``depth`` distinct incidents in one FAISS call; when it does not, the
#: fetch grows ``DENSE_FETCH_GROWTH`` times until it does or covers the index.  Floor and growth chosen by hand.
DENSE_FETCH_MIN = 200
DENSE_FETCH_PER_INCIDENT = 30
DENSE_FETCH_GROWTH = 4


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
    cache_dir: Path | None = None
    candidate_depth: int = Field(default=CANDIDATE_DEPTH, ge=1, description="Incidents taken from each ranking before fusion.")


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
                 token_memo: dict[str, list[str]] | None = None) -> None:
        """``token_memo`` is shared by successive engines of a live library (see :class:`LexicalIndex`)."""
        self.data = data
        self._token_memo = token_memo
        self.config = config or SearchConfig()
        self._given_embedder = embedder
        self.last_build: BuildReport | None = None
        self._dense: LoadedIndex | None = None
        self._row_maps_cache: tuple[np.ndarray, np.ndarray] | None = None

    # ---- corpus ------------------------------------------------------------
    @cached_property
    def chunks(self) -> list[Chunk]:
        return library_chunks(self.data.incidents.values(), self.data.vocab)

    @cached_property
    def _incident_ids(self) -> list[str]:
        return list(self.data.incidents)

    @cached_property
    def _chunk_incident(self) -> np.ndarray:
        position = {incident_id: i for i, incident_id in enumerate(self._incident_ids)}
        return np.array([position[c.incident_id] for c in self.chunks], dtype=np.int64)

    @cached_property
    def lexical(self) -> LexicalIndex:
        return LexicalIndex([c.text for c in self.chunks], memo=self._token_memo)

    # ---- dense ---------------------------------------------------------------
    @cached_property
    def embedder(self) -> Embedder:
        """The embedder given to the constructor, else the one ``config.embedder`` names."""
        return self._given_embedder or create_embedder(self.config.embedder)

    @property
    def cache_dir(self) -> Path:
        return self.config.cache_dir or default_cache_dir()

    def build(self, progress: ProgressFn | None = None) -> BuildReport:
        """Make sure the dense index is fresh (reuse, extend or rebuild) and return what was done."""
        self._row_maps_cache = None  # row order may change with the index
        self._dense, report = self._ensure(progress)
        return report

    def _ensure(self, progress: ProgressFn | None) -> tuple[LoadedIndex, BuildReport]:
        folder = store_dir(self.cache_dir, self.data.root, self.embedder.name)
        loaded, report = ensure_index(
            self.chunks, self.data.content_hash, self.embedder, folder, hnsw_threshold=self.config.hnsw_threshold, progress=progress
        )
        self.last_build = report
        return loaded, report

    @property
    def dense(self) -> LoadedIndex:
        """The dense index, loaded (or built without progress) on first use."""
        if self._dense is None:
            self._dense = self._ensure(None)[0]
        return self._dense

    @property
    def _row_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """Index row -> chunk position, and chunk position -> index row."""
        if self._row_maps_cache is None:
            self._row_maps_cache = self._compute_row_maps()
        return self._row_maps_cache

    def _compute_row_maps(self) -> tuple[np.ndarray, np.ndarray]:
        position = {chunk.id: i for i, chunk in enumerate(self.chunks)}
        row_to_chunk = np.array([position[chunk_id] for chunk_id in self.dense.chunk_ids], dtype=np.int64)
        chunk_to_row = np.empty(len(self.chunks), dtype=np.int64)
        chunk_to_row[row_to_chunk] = np.arange(len(row_to_chunk))
        return row_to_chunk, chunk_to_row

    # ---- ranking -------------------------------------------------------------
    def _allowed_chunks(self, allowed: set[str] | None) -> np.ndarray | None:
        if allowed is None:
            return None
        mask = np.array([incident_id in allowed for incident_id in self._incident_ids], dtype=bool)
        return np.flatnonzero(mask[self._chunk_incident])

    def _aggregate(self, chunk_ids: np.ndarray, scores: np.ndarray) -> list[tuple[str, float, int]]:
        """Best chunk per incident, incidents ordered by that chunk's score."""
        if len(chunk_ids) == 0:
            return []
        incidents = self._chunk_incident[chunk_ids]
        order = np.lexsort((-scores, incidents))  # by incident, best score first
        first = np.ones(len(order), dtype=bool)
        first[1:] = incidents[order][1:] != incidents[order][:-1]
        best = order[first]
        ranked = best[np.argsort(-scores[best], kind="stable")]
        return [(self._incident_ids[incidents[i]], float(scores[i]), int(chunk_ids[i])) for i in ranked]

    def rank_lexical(self, query: str, allowed: set[str] | None = None, depth: int | None = None) -> list[tuple[str, float, int]]:
        scores = self.lexical.scores(query)
        rows = self._allowed_chunks(allowed)
        candidates = np.flatnonzero(scores > 0) if rows is None else rows[scores[rows] > 0]
        ranked = self._aggregate(candidates, scores[candidates])
        return ranked if depth is None else ranked[:depth]

    def rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None = None, depth: int = CANDIDATE_DEPTH) -> list[tuple[str, float, int]]:
        index = self.dense.index
        row_to_chunk, chunk_to_row = self._row_maps
        chunks = self._allowed_chunks(allowed)
        rows = None if chunks is None else chunk_to_row[chunks]
        available = len(index) if rows is None else len(rows)
        fetch = min(available, max(DENSE_FETCH_MIN, depth * DENSE_FETCH_PER_INCIDENT))
        while True:
            scores, ids = index.search(vector, fetch, allowed=rows)
            ranked = self._aggregate(row_to_chunk[ids.astype(np.int64)], scores.astype(np.float32))
            if len(ranked) >= depth or fetch >= available:
                return ranked[:depth]
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
        lexical = self.rank_lexical(query, allowed, depth)
        dense = self.rank_dense(query, allowed, depth)
        return self.fuse_rankings(lexical, dense, k, fusion)

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
        _, chunk_to_row = self._row_maps
        rows = [chunk_to_row[i] for i, c in enumerate(self.chunks) if c.incident_id == incident_id and c.kind in wanted]
        vector = self.dense.vectors[rows].mean(axis=0)
        norm = float(np.linalg.norm(vector)) or 1.0
        result: np.ndarray = (vector / norm).astype(np.float32)
        return result
