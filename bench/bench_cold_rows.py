"""Scattered rows of a mapped similarity matrix read cold: page faults one after another, or announced first.

    python bench/bench_similar_1m.py ... --cache C          # saves the 1M similarity artefact under C/similarity/KEY
    python bench/bench_cold_rows.py --artefact C/similarity/KEY --rows 2500 --trials 4

A ``similar`` request on a large library scores a few thousand scattered incidents by their rows of the BM25 matrix
(:meth:`incidentlib.search.lexical_top.WeightedQuery.score_rows`).  The by-row arrays are mapped without read-ahead
(``MADV_RANDOM``), so a row not in the page cache is read when it is touched, one page fault at a time.  This compares,
on the same files, reading ``--rows`` random rows that way with announcing their pages first (``MADV_WILLNEED`` on
each row's pages, :func:`announce_rows`), which lets the kernel have the reads in flight together.  The library does not
announce (docs/benchmarks.md: cached, announcing cost more than the rows' scoring gains); this measures why.  Before each arm the two files are dropped from the page cache (``POSIX_FADV_DONTNEED``, with no mapping of
them left in this process); then the same rows are read again, cached.  The arms alternate which goes first, and each
trial draws new rows.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scipy import sparse  # type: ignore[import-untyped]  # noqa: E402

from incidentlib.mapped_arrays import _mapping_of, advise_random  # noqa: E402

BY_ROW = ("data", "indices")


def page_ranges(offset: int, itemsize: int, starts: np.ndarray, ends: np.ndarray,
                page: int = mmap.PAGESIZE) -> list[tuple[int, int]]:
    """Byte ranges ``(start, length)`` of the whole pages holding elements ``starts[i]:ends[i]`` of an array that begins
    ``offset`` bytes into a mapping; empty ranges dropped, overlapping or touching ones merged, ascending."""
    filled = ends > starts
    first = offset + starts[filled].astype(np.int64) * itemsize
    stop = offset + ends[filled].astype(np.int64) * itemsize
    if not len(first):
        return []
    first -= first % page
    stop += -stop % page
    order = np.argsort(first, kind="stable")
    first, stop = first[order], stop[order]
    reach = np.maximum.accumulate(stop)
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1]])
    closes = np.r_[opens[1:], len(first)] - 1
    return list(zip(first[opens].tolist(), (reach[closes] - first[opens]).tolist(), strict=True))


def announce_rows(array: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """``MADV_WILLNEED`` on the pages of elements ``starts[i]:ends[i]`` of the mapped, contiguous 1-D ``array``."""
    mapped = _mapping_of(array)
    assert mapped is not None and array.ndim == 1 and array.strides[0] == array.itemsize
    offset = array.ctypes.data - np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    for start, length in page_ranges(offset, array.itemsize, starts, np.minimum(ends, len(array))):
        mapped.madvise(mmap.MADV_WILLNEED, start, length)


def drop(folder: Path) -> None:
    """Drop the by-row files from the page cache; refuses while this process still maps them (their pages would stay)."""
    resolved = str(folder.resolve())
    if any(resolved in line for line in Path("/proc/self/maps").read_text().splitlines()):
        raise SystemExit(f"{folder}: still mapped by this process, its pages cannot be dropped")
    for name in BY_ROW:
        fd = os.open(folder / f"{name}.npy", os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def mapped_matrix(folder: Path) -> sparse.csr_matrix:
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in BY_ROW}
    for array in arrays.values():
        advise_random(np.asarray(array))
    indptr = np.load(folder / "indptr.npy")
    terms = len(np.load(folder / "idf.npy"))
    return sparse.csr_matrix((arrays["data"], arrays["indices"], indptr), shape=(len(indptr) - 1, terms))


def read(matrix: sparse.csr_matrix, positions: np.ndarray, vector: np.ndarray, announce: bool) -> tuple[float, float]:
    """Milliseconds to score the rows (announcing them first or not), and of that the announcing alone."""
    started = time.perf_counter()
    if announce:
        starts, ends = matrix.indptr[positions], matrix.indptr[positions + 1]
        announce_rows(matrix.indices, starts, ends)
        announce_rows(matrix.data, starts, ends)
    announced = time.perf_counter()
    np.asarray(matrix[positions] @ vector).ravel()
    return (time.perf_counter() - started) * 1000, (announced - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artefact", type=Path, required=True, help="a saved similarity artefact's folder")
    parser.add_argument("--rows", type=int, default=2500)
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    results: dict[str, dict[str, list[float]]] = {arm: {"cold": [], "cached": [], "announcing, cached": []}
                                                  for arm in ("faults", "announced")}
    incidents = len(np.load(args.artefact / "indptr.npy")) - 1
    terms = len(np.load(args.artefact / "idf.npy"))
    for trial in range(args.trials):
        for arm in ("faults", "announced") if trial % 2 == 0 else ("announced", "faults"):
            gc.collect()  # the previous arm's mapping is gone: its pages can be dropped
            drop(args.artefact)
            matrix = mapped_matrix(args.artefact)
            positions = np.sort(rng.choice(incidents, args.rows, replace=False))
            vector = np.zeros(terms)
            vector[rng.integers(0, terms, 300)] = 1.0
            results[arm]["cold"].append(read(matrix, positions, vector, arm == "announced")[0])
            cached, announcing = read(matrix, positions, vector, arm == "announced")
            results[arm]["cached"].append(cached)
            results[arm]["announcing, cached"].append(announcing)
            del matrix  # its mapping goes with it (drop() checks)
    print(f"{incidents:,} incidents; {args.rows:,} random rows a trial, {args.trials} trials\n")
    print("| rows read | cold, each trial (ms) | cached, each trial (ms) | of it announcing (ms) |")
    print("|---|---|---|---|")
    for arm, label in (("faults", "page faults one after another"), ("announced", "announced first")):
        cells = [" / ".join(f"{v:.1f}" for v in results[arm][kind]) for kind in ("cold", "cached", "announcing, cached")]
        print(f"| {label} | {cells[0]} | {cells[1]} | {cells[2] if arm == 'announced' else '–'} |")


if __name__ == "__main__":
    main()
