"""Scattered rows (and whole columns) of a memory-mapped matrix: which are on disk, and asking for them together.

A ``similar`` request on a large library reads the rows of a few thousand scattered incidents from the mapped BM25
matrix (:meth:`~incidentlib.search.lexical_top.WeightedQuery.score_rows`).  Those files are mapped without read-ahead
(``MADV_RANDOM``, :func:`~incidentlib.mapped_arrays.advise_random`), so a row that is not in the page cache costs a page
fault and a wait for one small read, then the next row another: at a million incidents held to 12 GB, 2,500 cold rows
took 638–781 ms that way and 71–152 ms when their pages were first announced with ``MADV_WILLNEED``, which puts the
reads in flight together (``bench/bench_cold_rows.py``).  Announcing rows that are already cached costs 1–3 ms a
request for nothing, and a library small enough to stay cached would pay it on every request.

So the rows are announced only when they are cold: :func:`rows_cold` asks the kernel (``mincore``) whether the pages
of a fixed sample of the rows are in the page cache (the first page of :data:`RESIDENCY_SAMPLE` rows in each of the
two arrays, one system call a distinct page), and :func:`announce_cold_rows` announces all of them when any sampled
page is not.  Where ``mincore`` or ``madvise`` is missing (not Linux or BSD) nothing is announced and rows are read
as before.  The by-term copy's columns are read whole, front to back, with the kernel's read-ahead, a window at a
time; :func:`announce_cold_columns` asks for all of a query's columns at once when one of them is cold, and the
BM25 index's postings are asked for the same way (:func:`announce_cold_slices`), and so are the lists of the inverted file
that a dense search probes, in a mapping FAISS made (:func:`announce_cold_spans`, by address).  Linux (since 5.0) also hides the page cache from a process that neither owns a mapped file nor may write
it, answering "cached" for every page: a server reading an artefact another user built then never announces;
:func:`residency_visible` tells, and the similarity store logs it when it maps such files.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .mapped_arrays import _mapping_of

if TYPE_CHECKING:  # a search from the shell reads the BM25 postings through this module and must not load scipy
    from scipy import sparse  # type: ignore[import-untyped]

#: Rows whose pages are looked up before a read: one missing among 32 evenly spread rows means about 3 % of them
#: (80 of 2,500) are cold, already tens of milliseconds of faults one after another against 1–3 ms to announce all;
#: fewer cold rows than that cost less than announcing them would.
RESIDENCY_SAMPLE = 32


def _mincore() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        function = ctypes.CDLL(None).mincore  # the C library the interpreter is linked with
    except (OSError, AttributeError, TypeError):  # no such symbol (not Linux or BSD), or no dynamic loading
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    function.restype = ctypes.c_int
    return function


_MINCORE = _mincore()


def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """``madvise`` by address, for mappings this process did not make through :mod:`mmap` (FAISS's)."""
    try:
        function = ctypes.CDLL(None).madvise
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_MADVISE = _madvise() if hasattr(mmap, "MADV_WILLNEED") else None


def page_ranges(offset: int, itemsize: int, starts: np.ndarray, ends: np.ndarray,
                page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """The byte ranges ``(start, length)`` of the whole pages holding elements ``starts[i]:ends[i]`` of an array that
    begins ``offset`` bytes into a mapping; empty element ranges dropped, overlapping or touching ones merged,
    ascending."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    filled = ends > starts
    if not filled.any():
        return []
    first = offset + starts[filled] * itemsize
    stop = offset + ends[filled] * itemsize
    first -= first % page
    stop += -stop % page
    order = np.argsort(first, kind="stable")
    first, stop = first[order], stop[order]
    reach = np.maximum.accumulate(stop)
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1]])
    closes = np.r_[opens[1:], len(first)] - 1
    return list(zip(first[opens].tolist(), (reach[closes] - first[opens]).tolist(), strict=True))


def _mapped_flat(array: np.ndarray) -> mmap.mmap | None:
    mapped = _mapping_of(array)
    if mapped is None or array.ndim != 1 or array.strides[0] != array.itemsize:
        return None
    return mapped


def pages_missing(array: np.ndarray, elements: np.ndarray) -> int | None:
    """How many of the pages holding ``array[elements]`` (a mapped 1-D array) are not in the page cache; None when
    that cannot be told (the array maps nothing, or the platform has no ``mincore``)."""
    if _MINCORE is None or _mapped_flat(array) is None:
        return None
    elements = np.asarray(elements, dtype=np.int64)
    return _addresses_missing(array.ctypes.data + elements[elements < len(array)] * array.itemsize)


def _addresses_missing(addresses: np.ndarray) -> int | None:
    """How many of the distinct pages holding the byte ``addresses`` (of mapped memory) are not in the page cache;
    None when that cannot be told."""
    if _MINCORE is None:
        return None
    page = mmap.PAGESIZE
    flag = (ctypes.c_ubyte * 1)()
    missing = 0
    for address in np.unique(addresses - addresses % page).tolist():
        if _MINCORE(ctypes.c_void_p(address), ctypes.c_size_t(page), flag) != 0:
            return None  # refused (not a mapping): no answer rather than a guess
        missing += not flag[0] & 1
    return missing


def residency_visible(path: Path) -> bool:
    """Whether ``mincore`` tells this process the truth about ``path``'s pages: it owns the file, may write it, or is
    privileged (Linux answers "all cached" otherwise, so as not to let a reader spy on another user's file)."""
    try:
        return os.geteuid() == 0 or path.stat().st_uid == os.geteuid() or os.access(path, os.W_OK)
    except (OSError, AttributeError):  # no such file, or no POSIX users: nothing to be hidden from
        return True


def will_need(array: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> int:
    """Announce (``MADV_WILLNEED``) that elements ``starts[i]:ends[i]`` of the mapped 1-D ``array`` are about to be
    read; returns the page ranges announced (0 when the array maps nothing or the platform has no ``madvise``)."""
    mapped = _mapped_flat(array)
    if mapped is None or not hasattr(mmap, "MADV_WILLNEED"):
        return 0
    offset = array.ctypes.data - np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    ranges = page_ranges(offset, array.itemsize, starts, np.minimum(ends, len(array)))
    size = len(mapped)
    with contextlib.suppress(OSError):  # a hint: refused, the rows are read by faults as before
        for start, length in ranges:
            mapped.madvise(mmap.MADV_WILLNEED, start, min(length, size - start))
    return len(ranges)


def _sample(positions: np.ndarray) -> np.ndarray:
    if len(positions) <= RESIDENCY_SAMPLE:
        return positions
    return positions[np.linspace(0, len(positions) - 1, RESIDENCY_SAMPLE).astype(np.int64)]


def _cold(arrays: tuple[np.ndarray, ...], elements: np.ndarray) -> bool:
    return any((pages_missing(array, elements) or 0) > 0 for array in arrays)


def rows_cold(rows: sparse.csr_matrix, positions: np.ndarray) -> bool:
    """Whether any page of the sampled rows (:data:`RESIDENCY_SAMPLE` of ``positions``, evenly spread) of the mapped
    CSR matrix ``rows`` is out of the page cache; False when that cannot be told."""
    sample = _sample(np.asarray(positions, dtype=np.int64))
    starts, ends = rows.indptr[sample], rows.indptr[sample + 1]
    first = starts[ends > starts]  # a row's first page: rows are a page or two long, and the sample is what counts
    return _cold((rows.data, rows.indices), first)


def _announce(indptr: np.ndarray, arrays: tuple[np.ndarray, ...], positions: np.ndarray) -> None:
    starts, ends = indptr[positions], indptr[positions + 1]
    for array in arrays:
        will_need(array, starts, ends)


def announce_cold_rows(rows: sparse.csr_matrix, positions: np.ndarray) -> bool:
    """Announce every row at ``positions`` of the mapped CSR matrix ``rows`` when there are at least
    :data:`RESIDENCY_SAMPLE` of them and :func:`rows_cold` finds their sample cold; returns whether it announced."""
    positions = np.asarray(positions, dtype=np.int64)
    # a few rows (a request's seeds, its own row) fault in about the time the check would take: not worth asking
    if len(positions) < RESIDENCY_SAMPLE or not rows_cold(rows, positions):
        return False
    _announce(rows.indptr, (rows.indices, rows.data), positions)
    return True


def announce_cold_slices(indptr: np.ndarray, arrays: tuple[np.ndarray, ...], picked: np.ndarray) -> bool:
    """Announce the whole of every slice ``indptr[i]:indptr[i+1]`` for ``i`` in ``picked`` of the mapped 1-D
    ``arrays`` when the first or last page of one of them (of :data:`RESIDENCY_SAMPLE`, evenly spread) is out of the
    page cache; returns whether it announced.  Such a slice (a term's column or postings) is read front to back; by
    page faults each first touch also reads the pages around it, so a query's many short slices read far more than
    they hold (at 1M, 63 MB a cold ``similar`` request for 1.8 MB of columns, docs/benchmarks.md), and the long ones a
    read-ahead window at a time.  Announced, they are read exactly, and all at once.  One slice is worth it."""
    picked = np.asarray(picked, dtype=np.int64)
    if not len(picked):
        return False
    sample = _sample(picked)
    starts, ends = indptr[sample], indptr[sample + 1]
    filled = ends > starts
    if not _cold(arrays, np.r_[starts[filled], ends[filled] - 1]):
        return False
    _announce(indptr, arrays, picked)
    return True


def announce_cold_columns(columns: sparse.csc_matrix, picked: np.ndarray) -> bool:
    """:func:`announce_cold_slices` for the columns ``picked`` of the mapped CSC matrix ``columns``."""
    return announce_cold_slices(columns.indptr, (columns.indices, columns.data), picked)


def announce_cold_spans(starts: np.ndarray, ends: np.ndarray) -> bool:
    """Announce (``MADV_WILLNEED``) every span of mapped memory ``starts[i]:ends[i]`` (addresses, in bytes) when the
    first or last page of one of them (of :data:`RESIDENCY_SAMPLE`, evenly spread) is out of the page cache; returns
    whether it announced.  For mappings made by a library rather than through :mod:`mmap`: the lists of FAISS's
    inverted file (codes, then ids), which a search scans front to back.  Scanned by page faults, a cold list is read
    one fault after another: at 1M incidents a cold ``similar`` spent 0.49 s of its 0.61 s in FAISS's scan of 31 MB
    of lists (``bench/probe_cold_reads.py --profile``).  Announced, they are read at once."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    filled = ends > starts
    starts, ends = starts[filled], ends[filled]
    if _MADVISE is None or not len(starts):
        return False
    sample = _sample(np.arange(len(starts)))
    if not _addresses_missing(np.r_[starts[sample], ends[sample] - 1]):
        return False
    for start, length in page_ranges(0, 1, starts, ends):
        if _MADVISE(ctypes.c_void_p(start), ctypes.c_size_t(length), mmap.MADV_WILLNEED) != 0:
            break  # refused (a hint): the rest is read by faults as before
    return True
