"""The embedder protocol every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

#: Texts per model call for the built-in backends (``EmbedderConfig.batch_size``): the
#: sentence-transformers default, kept for e5-small and use-m3; chosen by hand, not tuned.
DEFAULT_BATCH_SIZE = 32
#: Upper bound accepted for ``batch_size``: a guard against a mistyped value, not a measured limit.
MAX_BATCH_SIZE = 1024


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, batch first.

    Queries and documents are encoded separately because some models (e5) mark
    them differently; a symmetric model simply encodes both the same way.
    """

    name: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation (zero rows stay zero), as contiguous float32."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def empty(dim: int) -> np.ndarray:
    return np.zeros((0, dim), dtype=np.float32)
