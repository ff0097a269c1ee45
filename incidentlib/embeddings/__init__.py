"""Sentence embeddings behind one small protocol, created by one factory.

>>> from incidentlib.embeddings import create_embedder
>>> embedder = create_embedder("use-m3")        # or "e5-small", or "st:/path/to/model"
>>> embedder.encode_queries(["NCCL watchdog timeout"]).shape
(1, 512)

The default, ``use-m3``, was chosen by ``incidentlib eval`` (see README).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import EmbedderUnavailable
from .base import Embedder, normalize

BUILTIN_BACKENDS = ("e5-small", "use-m3")
DEFAULT_BACKEND = "use-m3"


class EmbedderConfig(BaseModel):
    """Which embedder to build: ``e5-small``, ``use-m3`` or ``st:<model path>``."""

    model_config = ConfigDict(frozen=True)

    backend: str = DEFAULT_BACKEND
    batch_size: int = Field(default=32, ge=1, le=1024)
    threads: int | None = Field(default=None, ge=1)

    @field_validator("backend")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in BUILTIN_BACKENDS or (value.startswith("st:") and len(value) > 3):
            return value
        raise ValueError(f"unknown embedder {value!r}: use one of {', '.join(BUILTIN_BACKENDS)} or st:<model path>")


_cache: dict[EmbedderConfig, Embedder] = {}


def create_embedder(config: EmbedderConfig | str | None = None) -> Embedder:
    """Build (once per process and config) the embedder a config names."""
    if config is None:
        config = EmbedderConfig()
    elif isinstance(config, str):
        config = EmbedderConfig(backend=config)
    if config in _cache:
        return _cache[config]
    embedder: Embedder
    if config.backend == "e5-small":
        from .e5 import E5SmallEmbedder

        embedder = E5SmallEmbedder(batch_size=config.batch_size, threads=config.threads)
    elif config.backend == "use-m3":
        from .use import UseM3Embedder

        embedder = UseM3Embedder(batch_size=config.batch_size, threads=config.threads)
    else:
        from .sentence_transformers import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(config.backend[3:], batch_size=config.batch_size)
    _cache[config] = embedder
    return embedder


__all__ = [
    "BUILTIN_BACKENDS",
    "DEFAULT_BACKEND",
    "Embedder",
    "EmbedderConfig",
    "EmbedderUnavailable",
    "create_embedder",
    "normalize",
]
