"""Resident memory of embedding the benchmark's queries in one call against batches of 16, in a large process.

    OPENBLAS_NUM_THREADS=1 python bench/probe_query_batch_rss.py --copies 188 --index ivf

builds ``bench_search.py``'s synthetic engine (``--copies`` copies of the bundled library; ``--index flat``
keeps the exact index, ``ivf`` lowers the inverted file's threshold to 100k vectors so that FAISS trains and
holds one, as at 100k incidents), then embeds ``--queries`` benchmark queries in batches of 16 (one BLAS
thread, as a served query) and in one call (the embedder's ``threads``), and prints the resident set and its
high-water mark after each, and the largest difference between the two sets of vectors.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_search as b

BATCH = 16  # the bench's own query batch (bench_search.run_size)


def high_water_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=94)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--index", choices=("flat", "ivf"), default="ivf")
    args = parser.parse_args()
    from incidentlib.search import dense
    if args.index == "ivf":
        dense.kind_for.__defaults__ = (dense.DEFAULT_HNSW_THRESHOLD, 100_000)
        dense.create.__defaults__ = (dense.DEFAULT_HNSW_THRESHOLD, 100_000)
    engine, tokens, _, _, incidents, _ = b.synthetic_engine(
        args.copies, noise=0.05, hnsw=False, hnsw_threshold=None if args.index == "ivf" else 10**9)
    del tokens
    gc.collect()
    texts = b.queries(args.queries)
    sys.stdout.write(f"engine: {incidents:,} incidents, {len(engine.chunks):,} chunks, index {args.index}" + "\n")
    sys.stdout.write(f"| step | RSS (MB) | high-water mark (MB) | s |\n|---|---|---|---|\n| engine built | {b.rss_mb():,.0f} | {high_water_mb():,.0f} | |" + "\n")
    started = time.perf_counter()
    batched = np.vstack([engine.embedder.encode_queries(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)])
    sys.stdout.write(f"| {len(texts)} queries in batches of {BATCH} | {b.rss_mb():,.0f} | {high_water_mb():,.0f} | {time.perf_counter() - started:.2f} |" + "\n")
    started = time.perf_counter()
    whole = engine.embedder.encode_queries(texts)
    sys.stdout.write(f"| {len(texts)} queries in one call | {b.rss_mb():,.0f} | {high_water_mb():,.0f} | {time.perf_counter() - started:.2f} |" + "\n")
    sys.stdout.write(f"largest difference between the two: {float(np.abs(whole - batched).max()):.2e}" + "\n")


if __name__ == "__main__":
    main()
