"""Query embedding and HNSW search under different thread settings, on one synthetic library.

    python bench/probe_threads.py --copies 93

Builds the synthetic library of ``bench_search.py`` (``--copies`` copies of the real incidents, HNSW
from 100k vectors) and times, query by query, a dense search (embedding inside), the ranking with
the query vector given, the embedding alone, and the ranking 50 ms after an embedding; first with
the default thread pools, then with BLAS limited to one thread, then with FAISS's OpenMP limited
to one thread, then both.  Medians in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import queries, synthetic_engine

from incidentlib.search.engine import SearchMode

#: Pause between an embedding and the ranking in the last row: long enough for spinning BLAS threads to sleep.
PAUSE_S = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=93)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    engine, tokens, _, timings, _, _ = synthetic_engine(args.copies, noise=0.05, hnsw=False, hnsw_threshold=100_000)
    del tokens
    sys.stdout.write(f"{engine.dense.index.describe()}; builds {timings}\n")
    sys.stdout.write(f"thread pools: {[(i['internal_api'], i['num_threads']) for i in threadpool_info()]}, "
                     f"faiss OpenMP threads {faiss.omp_get_max_threads()}\n\n")
    texts = queries(args.queries)
    given = engine.embedder.encode_queries(texts)

    def timed(work: Callable[..., object], *arguments: object) -> float:
        started = time.perf_counter()
        work(*arguments)
        return (time.perf_counter() - started) * 1000

    def run(label: str) -> None:
        rows: dict[str, list[float]] = {"dense search (embedding inside)": [], "ranking, query vector given": [],
                                        "query embedding alone": [], "ranking 50 ms after an embedding": []}
        for i, text in enumerate(texts):
            rows["dense search (embedding inside)"].append(timed(engine.search, text, 10, SearchMode.dense))
            rows["query embedding alone"].append(timed(engine.embedder.encode_queries, [text]))
            rows["ranking, query vector given"].append(timed(engine.rank_dense_vector, given[i], None, 10))
            engine.embedder.encode_queries([text])
            time.sleep(PAUSE_S)
            rows["ranking 50 ms after an embedding"].append(timed(engine.rank_dense_vector, given[i], None, 10))
        cells = " | ".join(f"{np.median(values):.1f}" for values in rows.values())
        sys.stdout.write(f"| {label} | {cells} |\n")

    sys.stdout.write("| threads | " + " | ".join(["dense search (embedding inside)", "ranking, query vector given",
                                                 "query embedding alone", "ranking 50 ms after an embedding"]) + " |\n|---|---|---|---|---|\n")
    run("default")
    with threadpool_limits(1, user_api="blas"):
        run("BLAS 1 thread")
    faiss.omp_set_num_threads(1)
    run("FAISS OpenMP 1 thread")
    with threadpool_limits(1, user_api="blas"):
        run("both 1 thread")


if __name__ == "__main__":
    main()
