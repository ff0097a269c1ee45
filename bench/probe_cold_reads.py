"""Where a cold ``similar`` request at 1M reads from: pages brought into the page cache, file by file.

    python bench/probe_cold_reads.py --ann-work W --postings P --cache C --queries 10 [--search 10]

Same engine and saved similarity artefact as ``bench_similar_1m.py``.  Every index file is dropped from the page cache
before anything is opened; one request (on an incident from the middle of the library) then reads what every
request needs (the vocabulary, the bounds, the first pages of each array).  Then each of ``--queries`` incidents
spread over the library is asked once, new to the cache, and after each the page-cache pages of every index file are
counted (``mincore`` over a read-only mapping of the whole file, which reads nothing); the difference is what that
request brought in, by its page faults, their read-ahead, the rows it announced and its ``pread`` calls alike.
Nothing else may run: another reader of the files would be counted too.  With ``--search N`` a hybrid search follows
each ``similar`` and is counted apart.  Reported: the mean MB each file gained per request, largest first, with the
request's time.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import mmap
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_search import queries, stage  # noqa: E402
from bench_similar_1m import synthetic_library  # noqa: E402
from bench_start import evict  # noqa: E402

from incidentlib.search.engine import SearchMode  # noqa: E402
from incidentlib.search.similarity import SimilarityIndex  # noqa: E402


# its own mincore, not the library's: the probe also runs against trees that have none
_MINCORE = ctypes.CDLL(None, use_errno=True).mincore
_MINCORE.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))


def cached_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (a fresh read-only mapping asked with ``mincore``; nothing is read)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), size, prot=mmap.PROT_READ) as mapped:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = np.zeros(pages, dtype=np.uint8)
        view = np.frombuffer(mapped, dtype=np.uint8)
        base = view.ctypes.data
        del view  # the mapping closes with no view of it left
        if _MINCORE(ctypes.c_void_p(base), ctypes.c_size_t(size), vector.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))) != 0:
            raise OSError(ctypes.get_errno(), f"mincore refused {path}")
        return int(np.count_nonzero(vector & 1))


def counted(files: list[Path], work: Callable[[], object]) -> tuple[dict[Path, int], float]:
    before = {path: cached_pages(path) for path in files}
    started = time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    return {path: cached_pages(path) - before[path] for path in files}, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ann-work", type=Path, required=True)
    parser.add_argument("--postings", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--search", type=int, default=0, metavar="N")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N functions of the cold requests with the most time of their own (cProfile)")
    args = parser.parse_args()
    roots = [args.ann_work, args.postings, args.cache]
    by_inode: dict[tuple[int, int], Path] = {}  # a file linked under two names (the inverted file's vectors) once
    for path in sorted(path for root in roots for path in root.rglob("*") if path.is_file() and path.stat().st_size > 0):
        by_inode.setdefault((path.stat().st_dev, path.stat().st_ino), path)
    files = sorted(by_inode.values())
    stage(f"dropped {evict(roots):,} index files from the page cache")
    engine, records, _ = synthetic_library(args.ann_work, args.postings, args.cache, {})
    index = SimilarityIndex(engine)
    if index.prepare(build=False) == "absent":
        raise SystemExit(f"no saved similarity artefact in {args.cache}; run bench_similar_1m.py once")
    ids = engine._incident_ids
    index.rank(index.incident_query(records[ids[len(ids) // 2 + 1]]), 10)  # what every request reads, read once
    texts = queries(args.search) if args.search else []
    stage("counting")
    totals: dict[str, dict[Path, list[int]]] = {"similar": {path: [] for path in files}, "search": {path: [] for path in files}}
    times: dict[str, list[float]] = {"similar": [], "search": []}
    page_mb = mmap.PAGESIZE / 2**20
    profile = cProfile.Profile() if args.profile else None

    def similar(incident: object) -> object:
        if profile is None:
            return index.rank(index.incident_query(incident), 10)
        return profile.runcall(lambda: index.rank(index.incident_query(incident), 10))

    searched = cProfile.Profile() if args.profile else None

    def search(text: str) -> object:
        if searched is None:
            return engine.search(text, k=10, mode=SearchMode.hybrid)
        return searched.runcall(lambda: engine.search(text, k=10, mode=SearchMode.hybrid))

    for n in range(args.queries):
        incident = records[ids[round(n * (len(ids) - 1) / max(args.queries - 1, 1))]]
        gained, seconds = counted(files, lambda incident=incident: similar(incident))
        times["similar"].append(seconds)
        for path, pages in gained.items():
            totals["similar"][path].append(pages)
        if texts:
            text = texts[n % len(texts)]
            gained, seconds = counted(files, lambda text=text: search(text))
            times["search"].append(seconds)
            for path, pages in gained.items():
                totals["search"][path].append(pages)
    for kind in ("similar", "search") if texts else ("similar",):
        spent = times[kind]
        sys.stdout.write(f"\n{args.queries} cold {kind} requests: p50 {statistics.median(spent) * 1000:.0f} ms, "
                         f"mean {statistics.fmean(spent) * 1000:.0f} ms\n\n| file | MB brought in a request (mean) | (max) |\n|---|---|---|\n")
        rows = sorted(((statistics.fmean(values) * page_mb, max(values) * page_mb, path) for path, values in totals[kind].items()),
                      reverse=True)
        total = sum(mean for mean, _, _ in rows)
        for mean, most, path in rows:
            if mean >= 0.05:
                sys.stdout.write(f"| {path.relative_to(path.parents[1])} | {mean:.1f} | {most:.1f} |\n")
        sys.stdout.write(f"| all files | {total:.1f} | |\n")
    if profile is not None:
        sys.stdout.write(f"\nThe cold similar requests, cProfile, the {args.profile} functions with the most time of their own:\n\n")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)
    if searched is not None and texts:
        sys.stdout.write(f"\nThe cold searches, cProfile, the {args.profile} functions with the most time of their own:\n\n")
        pstats.Stats(searched, stream=sys.stdout).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
