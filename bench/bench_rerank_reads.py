"""Re-ranking reads of the inverted file when its float32 rows are not in the page cache (1M incidents).

    python bench/bench_ann.py --copies 3110 --kinds ivf --mapped --work W   # 13.47M rows, a 27.5 GB vectors file
    python bench/bench_rerank_reads.py --work W

A search scores its best candidates again with their float32 rows, read from ``vectors.npy``
(:class:`incidentlib.search.ivf._RowReader`).  At 1M incidents that file is larger than this machine's memory, so
most rows a query asks for are read from disk.  This compares, in one run, the rows read one run after another
(the kernel hints switched off) with every run announced first (``POSIX_FADV_WILLNEED``, the library's code).

The page cache is dropped before each round (needs root; otherwise say so and measure anyway), then the codes are
read once by every query so that only the rows are cold.  The two arms answer different halves of the queries
(a row read by one arm would be cached for the other) and swap halves in the second round.  Last, both arms again
on rows now cached: what the hints cost when they are not needed.

``--read-ahead`` compares instead, the same way, the library's reader (its file opened ``POSIX_FADV_RANDOM``: only
the rows asked for are read) with a second load of the same index whose file has the kernel's read-ahead put back
(``POSIX_FADV_NORMAL``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib.search import dense, ivf  # noqa: E402


def drop_page_cache() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def timed(index: ivf.IvfIndex, queries: np.ndarray) -> np.ndarray:
    samples = []
    for query in queries:
        started = time.perf_counter()
        index.search(query, 10)
        samples.append(time.perf_counter() - started)
    return np.array(samples) * 1000


#: An arm: the index it searches and the ``posix_fadvise`` its reads run with (the library's, or none).
Arm = tuple[ivf.IvfIndex, Callable[[int, int, int, int], None]]


def compare(arms: dict[str, Arm], queries: np.ndarray) -> None:
    """Cold then cached re-ranking reads of each arm, printed as a table: the arms answer different halves of the
    queries cold (the page cache dropped before each round, the halves swapped in the second), then every query in
    turn with the rows cached."""
    announce = os.posix_fadvise
    half = len(queries) // 2
    cold: dict[str, list[np.ndarray]] = {name: [] for name in arms}
    for halves in [(slice(0, half), slice(half, 2 * half)), (slice(half, 2 * half), slice(0, half))]:
        if not drop_page_cache():
            sys.stderr.write("cannot drop the page cache (not root): rows read earlier may be cached\n")
        for index in {id(index): index for index, _ in arms.values()}.values():
            index.search_codes_batch(queries, 20)  # the lists every query probes, read once: only the rows stay cold
        for (name, (index, hint)), part in zip(arms.items(), halves, strict=True):
            ivf.os.posix_fadvise = hint  # type: ignore[assignment]
            cold[name].append(timed(index, queries[part]))
    cached: dict[str, list[float]] = {name: [] for name in arms}
    for query in queries[: 2 * half]:  # query by query, the arms in turn: a load change hits both alike
        for name, (index, hint) in arms.items():
            ivf.os.posix_fadvise = hint  # type: ignore[assignment]
            cached[name].extend(timed(index, query[None]).tolist())
    ivf.os.posix_fadvise = announce
    first = next(iter(arms.values()))[0]
    print(f"{len(first):,} rows, {first.describe()}; {2 * half} real queries, two rounds\n")
    print("| re-ranking reads | cold rows p50 / p99 (ms) | cached rows p50 / p99 (ms) |")
    print("|---|---|---|")
    for name in arms:
        rows = np.concatenate(cold[name])
        print(f"| {name} | {np.percentile(rows, 50):.2f} / {np.percentile(rows, 99):.2f} | "
              f"{np.percentile(cached[name], 50):.2f} / {np.percentile(cached[name], 99):.2f} |")


def load(work: Path) -> ivf.IvfIndex:
    index = dense.load(work / "ivf", "ivf")
    assert isinstance(index, ivf.IvfIndex) and index._reader is not None
    return index


def one_by_one(fd: int, offset: int, length: int, advice: int) -> None:
    """The hints switched off: each run is read when its turn comes."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="bench_ann.py's --work folder (queries.npy, an ivf folder)")
    parser.add_argument("--read-ahead", action="store_true", help="the library's reader against one with read-ahead")
    args = parser.parse_args()
    queries = np.load(args.work / "queries.npy")
    announce = os.posix_fadvise
    if args.read_ahead:
        ahead = load(args.work)
        assert ahead._reader is not None
        os.posix_fadvise(ahead._reader.fd, 0, 0, os.POSIX_FADV_NORMAL)
        compare({"no read-ahead (the library)": (load(args.work), announce), "read-ahead put back": (ahead, announce)},
                queries)
        return
    index = load(args.work)
    compare({"one run after another": (index, one_by_one), "every run announced first (the library)": (index, announce)},
            queries)


if __name__ == "__main__":
    main()
