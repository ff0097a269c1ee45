"""A deterministic, instant embedder for unit tests: hashed bag of words, L2-normalised."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from incidentlib.embeddings import normalize

WORD = re.compile(r"\w+")


class HashEmbedder:
    """Texts sharing words get similar vectors; counts calls so tests can see what was embedded."""

    def __init__(self, dim: int = 64, name: str = "fake-hash") -> None:
        self.name = name
        self.dim = dim
        self.documents_encoded = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        for word in WORD.findall(text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return vector

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize(np.vstack([self._vector(t) for t in texts]))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.documents_encoded += len(texts)
        return self._encode(texts)
