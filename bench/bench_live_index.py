"""What a write costs the search index of a serving process: carried (in memory) versus rebuilt and saved.

    python bench/bench_live_index.py --copies 5 --writes 20 --cache /tmp/bench-cache

One process, one library (the bundled one, ``--copies`` times larger: each copy repeats every
incident under a new id), one index cache.  Each write creates a draft through ``Library`` and
then times ``refresh()`` + ``prepare_search()`` — what the follower of ``serve`` does before the
next request can find the draft — alternating two ways of bringing the dense index along:

- **carried**: the previous engine's index is carried (dead rows masked, new rows appended in
  memory; ``search/layered.py``), nothing written;
- **rebuilt**: the carry is dropped, so the engine takes the unchanged vectors from the index on
  disk and writes a whole new build for the new content (what every write cost before).

Before each *rebuilt* write the carried index is compacted (not timed), so the index on disk holds
every earlier write, as it did when each write saved one.  Both are checked to find the draft by
hybrid search.  Then ``Library.compact()`` is timed once.
Alternating in one process keeps the two columns under the same machine load; the first run
with an empty ``--cache`` embeds the whole library (not timed).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_writes import draft, grow  # noqa: E402

from incidentlib import Library  # noqa: E402
from incidentlib.paths import resolve_data_dir  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--writes", type=int, default=20, help="Writes per column.")
    parser.add_argument("--cache", type=Path, required=True, help="Index cache (kept: later runs start warm).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-live-index-"))
    try:
        root = work / "lib"
        shutil.copytree(resolve_data_dir(), root, ignore=shutil.ignore_patterns(".incidentlib.db*"))
        grow(root, args.copies)
        library = Library.open(root, cache_dir=args.cache)
        library.build_index()
        library.search("warm up", k=1)
        library.prepare_search()
        timings: dict[str, list[float]] = {"carried": [], "rebuilt": []}
        for n in range(2 * args.writes):
            way = ("rebuilt", "carried")[n % 2]  # a carried write last: the compaction below has work to do
            word = f"livebench{n:04d}x{int(time.time()) % 100000}"
            if way == "rebuilt":
                library.compact()  # (not timed) the index on disk then holds every earlier write, as it used to
            record = library.create_draft(draft(word))  # create_draft's own refresh applies it; time the index part
            if way == "rebuilt":
                library._dense_carry = None
            started = time.perf_counter()
            library.prepare_search()
            timings[way].append(time.perf_counter() - started)
            build = library._search_engine.last_build
            assert build is not None and (build.action == "carried") == (way == "carried"), (way, build.action)
            found = [r.id for r in library.search(word, k=3).results]
            assert record.id in found, (way, word, found)
        compact_started = time.perf_counter()
        report = library.compact()
        compact_seconds = time.perf_counter() - compact_started
        chunks = len(library._search_engine.chunks)
        incidents = len(library)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms = 1000.0
    out = sys.stdout.write
    out(f"Produced by `python bench/bench_live_index.py --copies {args.copies} --writes {args.writes}` on "
        f"{platform.machine()}, CPython {platform.python_version()}: {incidents:,} incidents, {chunks:,} chunks, "
        f"use-m3; {args.writes} writes per column, alternating.\n\n")
    out("| dense index after a write | p50 (ms) | p99 (ms) | mean (ms) |\n|---|---|---|---|\n")
    for way, values in timings.items():
        out(f"| {way} | {pct(values, 0.5) * ms:.0f} | {pct(values, 0.99) * ms:.0f} | {statistics.mean(values) * ms:.0f} |\n")
    out(f"\nCompaction afterwards: {compact_seconds * ms:.0f} ms ({report.dense}, {report.dense_rows:,} rows, "
        f"{report.dead_rows_dropped:,} dead rows dropped, WAL {report.wal_bytes_before:,} → {report.wal_bytes_after:,} bytes).\n")


if __name__ == "__main__":
    main()
