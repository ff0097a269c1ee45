"""Named NumPy arrays in one self-describing file, read back through a memory map.

Layout::

    MAGIC (16 bytes) | digest (16 bytes) | header length n (8 bytes, little-endian) | header (n bytes of JSON)
    | zero padding to a multiple of ALIGNMENT | the arrays' bytes, each at a multiple of ALIGNMENT

Offsets in the header count from the end of that padding.

``digest = XXH3-128(header ‖ everything after the header)``, checked on every read, so a damaged or truncated
file is refused (:class:`MappedArraysError`), never half used. The header names the format, the caller's
``meta`` (what the arrays were made from, for the caller to compare) and each array's name, dtype, shape and
offset. Arrays come back as views of a copy-on-write map: a read costs the checksum's one pass over the bytes
(page-cache speed) instead of copying them into the heap, pages are shared with every process that maps the
same file, and an array written to changes only the process's own copy of a page, never the file.

:func:`map_verified_npy` does the same for one array in NumPy's own ``.npy`` format (the BM25 index's files):
mapped read-only after one pass that computes its checksum and checks its values block by block.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from . import checksum, file_memo, verified_memo
from .storage import atomic_write_bytes, release_pages

MAGIC = b"incidentlib-arr\x01"
#: Array starts are multiples of this: a cache line, and enough for any dtype's alignment.
ALIGNMENT = 64
FORMAT = 1
_PREFIX = struct.Struct("<16s16sQ")


class MappedArraysError(ValueError):
    """The file is not a readable arrays file: wrong magic, damaged, truncated or of another format."""


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    """Write ``arrays`` (no object dtypes) and the JSON-able ``meta`` to ``path`` atomically (temp file, rename)."""
    entries: list[dict[str, Any]] = []
    offset = 0
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise MappedArraysError(f"array {name!r} holds Python objects ({array.dtype}); only plain dtypes are stored")
        entries.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "offset": offset})
        offset = _aligned(offset + array.nbytes)
    header = json.dumps({"format": FORMAT, "meta": dict(meta), "arrays": entries}, sort_keys=True,
                        separators=(",", ":")).encode("utf-8")
    padding = _aligned(_PREFIX.size + len(header)) - _PREFIX.size - len(header)
    body = bytearray(padding + offset)
    for entry, array in zip(entries, arrays.values(), strict=True):
        start = padding + entry["offset"]
        body[start:start + array.nbytes] = np.ascontiguousarray(array).tobytes()
    hasher = xxhash.xxh3_128(header)
    hasher.update(body)
    atomic_write_bytes(path, b"".join((_PREFIX.pack(MAGIC, hasher.digest(), len(header)), header, body)))


def read_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the meta written by :func:`write_arrays`; raises ``OSError`` as opening does, and
    :class:`MappedArraysError` naming ``path`` and the reason for anything else wrong with the file."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        if size < _PREFIX.size:
            raise MappedArraysError(f"{path}: {size} bytes, shorter than the arrays header")
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    magic, digest, header_length = _PREFIX.unpack_from(mapped, 0)
    if magic != MAGIC:
        raise MappedArraysError(f"{path}: not an incidentlib arrays file (magic {magic!r})")
    if _PREFIX.size + header_length > size:
        raise MappedArraysError(f"{path}: truncated (header of {header_length} bytes, file of {size})")
    view = memoryview(mapped)
    header = bytes(view[_PREFIX.size:_PREFIX.size + header_length])
    hasher = xxhash.xxh3_128(header)
    hasher.update(view[_PREFIX.size + header_length:])
    if hasher.digest() != digest:
        raise MappedArraysError(f"{path}: checksum mismatch (damaged or truncated)")
    try:
        parsed = json.loads(header)
        if parsed["format"] != FORMAT:
            raise MappedArraysError(f"{path}: arrays format {parsed['format']}, this version reads {FORMAT}")
        arrays: dict[str, np.ndarray] = {}
        payload_start = _aligned(_PREFIX.size + header_length)
        for entry in parsed["arrays"]:
            dtype = np.dtype(entry["dtype"])
            shape = tuple(int(side) for side in entry["shape"])
            count = math.prod(shape)
            start = payload_start + int(entry["offset"])
            if dtype.hasobject or entry["offset"] < 0 or start + count * dtype.itemsize > size:
                raise MappedArraysError(f"{path}: array {entry['name']!r} does not fit the file")
            arrays[entry["name"]] = np.frombuffer(mapped, dtype=dtype, count=count, offset=start).reshape(shape)
        return arrays, dict(parsed["meta"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, MappedArraysError):
            raise
        raise MappedArraysError(f"{path}: unreadable header ({type(exc).__name__}: {exc})") from exc


#: Elements checked (and hashed) at a time by :func:`map_verified_npy`: a few MB, so a block is still in the CPU's
#: cache when it is checked right after being hashed. Chosen, not tuned.
CHECK_ELEMENTS = 1 << 20


def map_verified_npy(path: Path, expected: str, check: Callable[[np.ndarray], str | None] | None = None,
                     block: int = CHECK_ELEMENTS, memo_checks: str | None = None, random_access: bool = False) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, mapped read-only, after one pass over the file's bytes that both
    computes its checksum (compared with ``expected``, a :func:`incidentlib.checksum.checksum_file` value) and
    runs ``check`` on each block of ``block`` elements (it returns a reason to refuse the file, or None).

    One pass instead of reading the file for its checksum and then again into the heap: the array stays in the
    page cache, shared by every process that maps the file, and after the pass this process's mapping lets its
    pages go (``MADV_DONTNEED``; the page cache keeps them), so only what is later read counts in its RSS.

    With ``memo_checks`` (the caller's name for what ``check`` verifies, with its parameters), a pass that succeeds
    is remembered beside the file (:mod:`incidentlib.verified_memo`) and skipped while the file is unchanged.
    With ``random_access`` the mapping is advised so (``MADV_RANDOM``) once verified: an array read a few entries
    at a time at scattered places (the rows of some incidents out of a million) then brings in only the pages it
    touches.  Without the advice every such read is a read-ahead of the pages around it (128 KB by default on
    Linux, against the few KB a row holds), which fills memory with pages nobody asked for and, once the file is
    larger than the memory left for it, pushes out the ones that will be read next.

    Raises ``OSError`` as opening does and :class:`MappedArraysError` naming ``path`` and the reason otherwise.
    """
    array = _map_verified_npy(path, expected, check, block, memo_checks)
    if random_access:
        advise_random(array)
    return array


def _mapping_of(array: np.ndarray) -> mmap.mmap | None:
    """The memory map under ``array`` (following its chain of views), or None."""
    base: object = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.obj if isinstance(base, memoryview) else base.base
    return base if isinstance(base, mmap.mmap) else None


def advise_random(array: np.ndarray) -> None:
    """Tell the kernel the memory map under ``array`` is read at random (``MADV_RANDOM``: no read-ahead); no-op for
    an array that maps nothing or where the platform has no ``madvise``."""
    mapped = _mapping_of(array)
    if mapped is not None and hasattr(mmap, "MADV_RANDOM"):
        with contextlib.suppress(OSError):  # a hint: a kernel that refuses it reads the same bytes, only more of them
            mapped.madvise(mmap.MADV_RANDOM)


def _map_verified_npy(path: Path, expected: str, check: Callable[[np.ndarray], str | None] | None,
                      block: int, memo_checks: str | None) -> np.ndarray:
    with path.open("rb") as handle:
        before = file_memo.signature(os.fstat(handle.fileno()))  # of the bytes mapped below
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise ValueError(f".npy version {version}")
        except ValueError as exc:
            raise MappedArraysError(f"{path}: not a readable .npy file ({exc})") from None
        offset = handle.tell()
        size = handle.seek(0, 2)
        count = math.prod(shape)
        if fortran or dtype.hasobject or offset + count * dtype.itemsize > size:
            raise MappedArraysError(f"{path}: {'Fortran-ordered' if fortran else 'object' if dtype.hasobject else 'truncated'} "
                                    "array")
        if size == 0 or count == 0:
            mapped_bytes: bytes | mmap.mmap = path.read_bytes()
        else:
            mapped_bytes = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    array = np.frombuffer(mapped_bytes, dtype=dtype, count=count, offset=offset)
    if memo_checks is not None and verified_memo.recall(path, expected, memo_checks, before):
        return array.reshape(shape)
    view = memoryview(mapped_bytes)
    hasher = xxhash.xxh3_128(view[:offset])
    for start in range(0, count, block):
        part = array[start:start + block]
        hasher.update(part.data)
        reason = check(part) if check is not None else None
        if reason is not None:
            raise MappedArraysError(f"{path}: {reason}")
    hasher.update(view[offset + count * dtype.itemsize:])
    if f"{checksum.ALGORITHM}:{hasher.hexdigest()}" != expected:
        raise MappedArraysError(f"{path}: does not match its checksum")
    if isinstance(mapped_bytes, mmap.mmap):
        release_pages(mapped_bytes, 0, len(mapped_bytes))
    if memo_checks is not None:
        verified_memo.remember(path, before, expected, memo_checks)
    return array.reshape(shape)
