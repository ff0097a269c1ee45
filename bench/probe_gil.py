"""Whether the array operations of a hybrid query's legs release the GIL (the legs run in two threads).

    python bench/probe_gil.py [--chunks 1350000]

A pure-Python thread spins while this thread repeats one operation on arrays of the sizes a 100k-incident
library has (1.35M chunk scores, a 300k-posting term, 100k incident runs). The spinner's CPU time divided by the
operation's wall time is near 0 when the operation holds the GIL (it cannot run), and as high as the machine's
free cores allow when it releases it. Two controls bracket it: ``sorted`` of a list (holds the GIL) and a
ufunc over a large array (releases it). Ratios, not times: the machine may be shared.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable

import numpy as np


def spinner_share(operation: Callable[[], object], repeats: int = 20) -> tuple[float, float]:
    """(spinner CPU seconds ÷ operation wall seconds, wall ms per operation) while ``operation`` repeats."""
    stop = threading.Event()
    cpu = [0.0]

    def spin() -> None:
        start = time.thread_time()
        while not stop.is_set():
            pass
        cpu[0] = time.thread_time() - start

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.02)
    started = time.perf_counter()
    for _ in range(repeats):
        operation()
    wall = time.perf_counter() - started
    stop.set()
    thread.join()
    return cpu[0] / wall, wall / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_350_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.chunks
    postings = np.sort(rng.choice(n, min(n, 300_000), replace=False)).astype(np.int32)
    weights = rng.random(len(postings)).astype(np.float32)
    runs = np.sort(rng.choice(n, min(n, 100_000), replace=False))
    runs[0] = 0
    scores = np.zeros(n, dtype=np.float32)
    values = rng.random(n).astype(np.float32)
    big_list = list(range(2_000_000))
    big = rng.random(n * 4).astype(np.float32)
    out = np.empty_like(big)

    def add_term() -> None:
        scores[postings] += weights

    operations: dict[str, Callable[[], object]] = {
        "BM25: scores[postings] += weights (one term)": add_term,
        "per-incident max: np.maximum.reduceat": lambda: np.maximum.reduceat(values, runs),
        "depth cut: np.partition": lambda: np.partition(values, n - 50),
        "positive scores: np.flatnonzero(s > 0)": lambda: np.flatnonzero(values > 0.5),
        "control, holds the GIL: sorted(list of 2M)": lambda: sorted(big_list),
        "control, releases it: ufunc over 5.4M floats": lambda: np.multiply(big, 1.0, out=out),
    }
    print("| operation | ms each | spinner CPU ÷ wall |")
    print("|---|---|---|")
    for name, operation in operations.items():
        share, ms = spinner_share(operation)
        print(f"| {name} | {ms:.2f} | {share:.2f} |")


if __name__ == "__main__":
    main()
