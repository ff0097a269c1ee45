"""Scattered rows of a mapped similarity matrix read cold: page faults one after another, or announced first.

    python bench/bench_similar_1m.py ... --cache C          # saves the 1M similarity artefact under C/similarity/KEY
    python bench/bench_cold_rows.py --artefact C/similarity/KEY --rows 2500 --trials 4

A ``similar`` request on a large library scores a few thousand scattered incidents by their rows of the BM25 matrix
(:meth:`incidentlib.search.lexical_top.WeightedQuery.score_rows`).  The by-row arrays are mapped without read-ahead
(``MADV_RANDOM``), so a row not in the page cache is read when it is touched, one page fault at a time.  This compares,
on the same files, three ways of reading ``--rows`` random rows: by page faults alone; announcing every row's pages
first (``MADV_WILLNEED``, :func:`incidentlib.cold_pages.will_need`), which lets the kernel have the reads in flight
together; and what the library does, announcing them only when a sample of the rows is out of the page cache
(:func:`incidentlib.cold_pages.announce_cold_rows`).  Before each arm the two files are dropped from the page cache
(``POSIX_FADV_DONTNEED``, with no mapping of them left in this process); then the same rows are read again, cached,
which is where always announcing costs and the library's check should not.  Each arm goes first in turn, and each
trial draws new rows.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scipy import sparse  # type: ignore[import-untyped]  # noqa: E402

from incidentlib.cold_pages import announce_cold_rows, will_need  # noqa: E402
from incidentlib.mapped_arrays import advise_random  # noqa: E402

BY_ROW = ("data", "indices")
ARMS = ("faults", "announced", "when cold")


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


def read(matrix: sparse.csr_matrix, positions: np.ndarray, vector: np.ndarray, arm: str) -> tuple[float, float]:
    """Milliseconds to score the rows as ``arm`` reads them, and of that the announcing (or deciding whether to)."""
    started = time.perf_counter()
    if arm == "announced":
        starts, ends = matrix.indptr[positions], matrix.indptr[positions + 1]
        will_need(matrix.indices, starts, ends)
        will_need(matrix.data, starts, ends)
    elif arm == "when cold":
        announce_cold_rows(matrix, positions)
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
    results: dict[str, dict[str, list[float]]] = {arm: {"cold": [], "cached": [], "announcing, cached": []} for arm in ARMS}
    incidents = len(np.load(args.artefact / "indptr.npy")) - 1
    terms = len(np.load(args.artefact / "idf.npy"))
    for trial in range(args.trials):
        for arm in ARMS[trial % len(ARMS):] + ARMS[:trial % len(ARMS)]:  # each arm first in turn
            gc.collect()  # the previous arm's mapping is gone: its pages can be dropped
            drop(args.artefact)
            matrix = mapped_matrix(args.artefact)
            positions = np.sort(rng.choice(incidents, args.rows, replace=False))
            vector = np.zeros(terms)
            vector[rng.integers(0, terms, 300)] = 1.0
            results[arm]["cold"].append(read(matrix, positions, vector, arm)[0])
            cached, announcing = read(matrix, positions, vector, arm)
            results[arm]["cached"].append(cached)
            results[arm]["announcing, cached"].append(announcing)
            del matrix  # its mapping goes with it (drop() checks)
    print(f"{incidents:,} incidents; {args.rows:,} random rows a trial, {args.trials} trials\n")
    print("| rows read | cold, each trial (ms) | cached, each trial (ms) | of it announcing or deciding to (ms) |")
    print("|---|---|---|---|")
    for arm, label in (("faults", "page faults one after another"), ("announced", "always announced first"),
                       ("when cold", "announced when a sample is cold (the library)")):
        cells = [" / ".join(f"{v:.1f}" for v in results[arm][kind]) for kind in ("cold", "cached", "announcing, cached")]
        print(f"| {label} | {cells[0]} | {cells[1]} | {cells[2] if arm != 'faults' else '–'} |")


if __name__ == "__main__":
    main()
