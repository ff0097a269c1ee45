"""Any sentence-transformers model given by a local path or a name already in the local cache.

Nothing is downloaded.  The model must already be on disk: a directory given by path,
or a copy in the Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
``~/.cache/huggingface/hub``).  That is checked *before* sentence-transformers is
imported, so a name that is not on disk fails at once with an
:class:`~incidentlib.errors.EmbedderUnavailable` naming the path it expected; the
load itself runs with ``local_files_only=True``, which keeps that one call offline
without touching ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import EmbedderUnavailable
from .base import empty, normalize

#: Texts per encode call: the sentence-transformers default, a good CPU batch.
DEFAULT_BATCH_SIZE = 32


def hf_cache_dir() -> Path:
    """Where the Hugging Face hub keeps downloaded models (read from the environment, never changed)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def local_model_path(model: str) -> Path:
    """The directory holding ``model`` on this machine; :class:`EmbedderUnavailable` naming the path expected.

    ``model`` is a directory, or a hub name (``org/name``) with a snapshot in the local cache.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    cached = hf_cache_dir() / f"models--{model.replace('/', '--')}" / "snapshots"
    snapshots = sorted(cached.iterdir(), key=lambda p: p.stat().st_mtime) if cached.is_dir() else []
    if snapshots:
        return snapshots[-1]
    raise EmbedderUnavailable(
        f"st:{model}: no model on disk at {path.resolve()} (nor a cached copy in {cached.parent}); "
        "nothing is downloaded offline — give a local directory that holds the model"
    )


class SentenceTransformerEmbedder:
    """``st:<path>``. e5-family models get their ``query:``/``passage:`` prefixes."""

    def __init__(self, model: str, batch_size: int = DEFAULT_BATCH_SIZE, device: str = "cpu") -> None:
        path = local_model_path(model)  # before sentence-transformers is imported: no network, no delay
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderUnavailable(
                "the st: backend needs sentence-transformers: pip install torch==2.13.0 'incidentlib[st]'"
            ) from exc
        try:
            self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise EmbedderUnavailable(
                f"st:{model}: cannot load the sentence-transformers model in {path} offline: {exc}"
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
