"""The default ranking backend: BM25 and the dense index in this process (see :class:`.engine.SearchEngine`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .backend import LOCAL, Ranked

if TYPE_CHECKING:
    from .dense import ProgressFn
    from .engine import SearchEngine


class LocalBackend:
    """Ranks with the engine's own numpy postings and vector index; nothing to prepare besides them."""

    spec = LOCAL

    def __init__(self, engine: SearchEngine) -> None:
        self.engine = engine

    def prepare(self, progress: ProgressFn | None = None) -> None:
        """Nothing beyond the engine's indexes, which build on first use."""

    def rank_lexical(self, query: str, allowed: set[str] | None, depth: int | None) -> list[Ranked]:
        return self.engine.local_rank_lexical(query, allowed, depth)

    def rank_dense_vector(self, vector: np.ndarray, allowed: set[str] | None, depth: int) -> list[Ranked]:
        return self.engine.local_rank_dense_vector(vector, allowed, depth)
