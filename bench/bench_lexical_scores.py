"""BM25 scoring of every chunk for a query, and each incident's best chunk score: three ways in one run.

    python bench/bench_lexical_scores.py --postings FOLDER [--queries 100] [--run-chunks 13]

``FOLDER`` is a lexical cache folder (``<cache>/lexical/<key>``: the 100k library's) or the postings folder of
``bench_search_1m.py`` (1M incidents).  For each of the first ``--queries`` questions of eval/queries.jsonl, in
turn, the chunk scores and the per-incident maxima are computed each way over the same mapped postings, and must be
equal bit for bit:

- ``scores[indices] += weights`` per query term over every chunk (gathers the touched scores into a temporary, adds,
  scatters back), then ``np.maximum.reduceat`` over every chunk;
- ``np.add.at(scores, indices, weights)`` per query term over every chunk (one pass adding in place), then
  ``np.maximum.reduceat``: the library until the scores were summed in blocks;
- :meth:`incidentlib.search.lexical.LexicalIndex.run_scores`: every term's postings added a block of chunks at a
  time (:data:`~incidentlib.search.lexical.SCORE_BLOCK_CHUNKS`), each block reduced while it is in the cache;
- the same with ``depth=50`` (the hybrid leg's candidate depth, what the engine asks): only the incidents that can
  rank among the 50 best are reduced.  Its scores must be equal, and its 50 best incidents (with their scores) those
  of the full reduction.

Incidents are runs of ``--run-chunks`` chunks (13: both benchmark libraries have 13.4-13.5 chunks an incident; the
reduction's cost follows the number of runs, not where they end).  A term's chunks are distinct, and every way adds
a chunk's terms in query order, so the float32 sums are equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_search_1m import mapped_postings  # noqa: E402

from incidentlib.search.engine import CANDIDATE_DEPTH  # noqa: E402
from incidentlib.search.lexical import LexicalIndex, Postings  # noqa: E402
from incidentlib.search.lexical_store import LexicalMeta, load_postings  # noqa: E402


def open_postings(folder: Path) -> Postings:
    if (folder / "meta.json").exists():  # a lexical cache folder
        meta = LexicalMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
        return load_postings(folder, meta.chunks)
    return mapped_postings(folder)  # bench_search_1m.py's postings folder


def by_fancy_index(index: LexicalIndex, query: str, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = index.postings
    scores = np.zeros(p.size, dtype=np.float32)
    for term in index._token_ids(query):
        start, end = p.indptr[term], p.indptr[term + 1]
        scores[p.indices[start:end]] += p.data[start:end]
    return scores, np.maximum.reduceat(scores, runs)


def by_add_at(index: LexicalIndex, query: str, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = index.postings
    scores = np.zeros(p.size, dtype=np.float32)
    for term in index._token_ids(query):
        start, end = p.indptr[term], p.indptr[term + 1]
        np.add.at(scores, p.indices[start:end], p.data[start:end])
    return scores, np.maximum.reduceat(scores, runs)


def by_blocks(index: LexicalIndex, query: str, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores, best = index.run_scores(query, runs)
    assert best is not None
    return scores, best


def by_blocks_to_depth(index: LexicalIndex, query: str, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores, best = index.run_scores(query, runs, CANDIDATE_DEPTH)
    assert best is not None
    return scores, best


def best_runs(best: np.ndarray, depth: int) -> list[tuple[int, float]]:
    """The ``depth`` runs with the largest positive best scores, ties to the earlier run (as the engine ranks)."""
    runs = np.flatnonzero(best > 0)
    ranked = runs[np.lexsort((runs, -best[runs]))][:depth]
    return list(zip(ranked.tolist(), best[ranked].tolist(), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--run-chunks", type=int, default=13)
    args = parser.parse_args()
    index = LexicalIndex(postings=open_postings(args.postings))
    runs = np.arange(0, index.postings.size, args.run_chunks, dtype=np.int64)
    lines = (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()[: args.queries]
    texts = [json.loads(line)["query"] for line in lines]
    ways = {"term by term, `scores[indices] += weights`": lambda q: by_fancy_index(index, q, runs),
            "term by term, `np.add.at`": lambda q: by_add_at(index, q, runs),
            "in blocks (`run_scores`), every incident reduced": lambda q: by_blocks(index, q, runs),
            f"in blocks, depth {CANDIDATE_DEPTH} (the library's lexical leg)": lambda q: by_blocks_to_depth(index, q, runs)}
    for text in texts[:3]:  # the postings' pages read once before timing
        for way in ways.values():
            way(text)
    samples: dict[str, list[float]] = {name: [] for name in ways}
    postings = []
    for number, text in enumerate(texts):
        results = {}
        for name in list(ways)[:: 1 if number % 2 else -1]:  # the order alternates from query to query
            started = time.perf_counter()
            results[name] = ways[name](text)
            samples[name].append(time.perf_counter() - started)
        *full, (depth_scores, depth_best) = (results[name] for name in ways)  # in the ways' order
        if not all(np.array_equal(r[0], full[0][0]) and np.array_equal(r[1], full[0][1]) for r in full[1:]):
            raise SystemExit(f"the ways score {text!r} differently")
        if not np.array_equal(depth_scores, full[0][0]) or best_runs(depth_best, CANDIDATE_DEPTH) != best_runs(full[0][1], CANDIDATE_DEPTH):
            raise SystemExit(f"the depth-{CANDIDATE_DEPTH} way ranks {text!r} differently")
        postings.append(sum(int(index.postings.indptr[t + 1] - index.postings.indptr[t]) for t in index._token_ids(text)))
    print(f"{index.postings.size:,} chunks, {len(index.postings.vocabulary):,} terms; {len(texts)} queries, "
          f"median {int(np.median(postings)):,} postings a query, incidents as runs of {args.run_chunks} chunks; "
          f"equal scores and maxima (the same {CANDIDATE_DEPTH} best at depth {CANDIDATE_DEPTH}) for every query\n")
    print("| chunk scores and per-incident maxima of a query | p50 (ms) | p99 (ms) |")
    print("|---|---|---|")
    for name, values in samples.items():
        ms = np.array(values) * 1000
        print(f"| {name} | {np.percentile(ms, 50):.2f} | {np.percentile(ms, 99):.2f} |")


if __name__ == "__main__":
    main()
