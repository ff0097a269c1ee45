"""Profile the search hot path on a synthetic library (cProfile), for docs/benchmarks.md.

    python bench/profile_search.py --size 10000 --queries 50 --top 25 [--legs concurrent]

Builds the same synthetic library as ``bench_search.py`` (copies of the real incidents with
perturbed real vectors), times the BM25 and dense index builds, then profiles ``queries``
hybrid searches and prints the functions with the most cumulative and own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_search import queries, synthetic_engine  # noqa: E402

from incidentlib import Library  # noqa: E402
from incidentlib.search.engine import SearchMode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10000, help="library size in incidents")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--mode", choices=[m.value for m in SearchMode], default="hybrid")
    parser.add_argument("--legs", choices=["sequential", "concurrent"], default="sequential",
                        help="hybrid legs one after the other (default: cProfile sees only the calling thread, so a "
                        "concurrent BM25 leg would be missing from the profile) or concurrently")
    args = parser.parse_args()

    copies = max(1, round(args.size / len(Library.open())))
    started = time.perf_counter()
    engine, _tokens, _hnsw, timings, incidents, _rss = synthetic_engine(copies, noise=0.05, hnsw=False)
    del _tokens  # the floor's token lists: not part of a served engine
    engine.config = engine.config.model_copy(update={"concurrent_legs": args.legs == "concurrent"})
    print(f"{incidents:,} incidents, {len(engine.chunks):,} chunks; setup {time.perf_counter() - started:.1f} s; builds {timings}")
    texts = queries(args.queries)
    mode = SearchMode(args.mode)
    for text in texts[:3]:
        engine.search(text, k=10, mode=mode)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for text in texts:
        engine.search(text, k=10, mode=mode)
    profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"{len(texts)} {mode.value} searches: {elapsed / len(texts) * 1000:.1f} ms each (under the profiler)")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    for key in ("cumulative", "tottime"):
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(key).print_stats(args.top)
        print(buffer.getvalue())


if __name__ == "__main__":
    main()
