"""Any sentence-transformers model given by a local path or a name already in the local cache.

Nothing is downloaded: ``HF_HUB_OFFLINE`` is forced on while the model loads, so
a name that is not on disk fails fast with a clear error instead of reaching
for the network.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import EmbedderUnavailable
from .base import empty, normalize


@contextmanager
def _offline():
    saved = {key: os.environ.get(key) for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class SentenceTransformerEmbedder:
    """``st:<path>``. e5-family models get their ``query:``/``passage:`` prefixes."""

    def __init__(self, model: str, batch_size: int = 32, device: str = "cpu"):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderUnavailable(
                "the st: backend needs sentence-transformers: pip install torch==2.13.0 'incidentlib[st]'"
            ) from exc
        path = Path(model).expanduser()
        with _offline():
            try:
                self._model = SentenceTransformer(str(path) if path.exists() else model, device=device)
            except Exception as exc:
                raise EmbedderUnavailable(
                    f"cannot load sentence-transformers model {model!r} offline: {exc}. "
                    "Give a local directory that holds the model."
                ) from exc
        self.name = f"st:{model}"
        dimension = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dimension() or 0)
        self.batch_size = batch_size
        self._prefixed = "e5" in model.lower()

    def _encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        if not texts:
            return empty(self.dim)
        batch = [prefix + t for t in texts] if self._prefixed else list(texts)
        vectors = self._model.encode(batch, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return normalize(vectors)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "query: ")

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "passage: ")
