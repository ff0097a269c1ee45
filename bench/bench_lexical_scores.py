"""BM25 scoring of every chunk for a query: the postings added by fancy indexing against ``np.add.at``, one run.

    python bench/bench_lexical_scores.py --postings FOLDER [--queries 100]

``FOLDER`` is a lexical cache folder (``<cache>/lexical/<key>``: the 100k library's) or the postings folder of
``bench_search_1m.py`` (1M incidents).  For each of the first ``--queries`` questions of eval/queries.jsonl, in
turn, the chunk scores are computed both ways over the same mapped postings, and must be equal bit for bit:

- ``scores[indices] += weights`` per query term (gathers the touched scores into a temporary, adds, scatters back);
- ``np.add.at(scores, indices, weights)`` per query term (one pass adding in place), what
  :meth:`incidentlib.search.lexical.LexicalIndex.scores` does.

A term's chunks are distinct, so both add each posting once, in the same order.
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

from incidentlib.search.lexical import LexicalIndex, Postings  # noqa: E402
from incidentlib.search.lexical_store import LexicalMeta, load_postings  # noqa: E402


def open_postings(folder: Path) -> Postings:
    if (folder / "meta.json").exists():  # a lexical cache folder
        meta = LexicalMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
        return load_postings(folder, meta.chunks)
    return mapped_postings(folder)  # bench_search_1m.py's postings folder


def by_fancy_index(index: LexicalIndex, query: str) -> np.ndarray:
    p = index.postings
    scores = np.zeros(p.size, dtype=np.float32)
    for term in index._token_ids(query):
        start, end = p.indptr[term], p.indptr[term + 1]
        scores[p.indices[start:end]] += p.data[start:end]
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    index = LexicalIndex(postings=open_postings(args.postings))
    lines = (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()[: args.queries]
    texts = [json.loads(line)["query"] for line in lines]
    ways = {"scores[indices] += weights": lambda q: by_fancy_index(index, q), "np.add.at (the library)": index.scores}
    for text in texts[:3]:  # the postings' pages read once before timing
        for way in ways.values():
            way(text)
    samples: dict[str, list[float]] = {name: [] for name in ways}
    postings = []
    for number, text in enumerate(texts):
        results = {}
        for name in list(ways)[:: 1 if number % 2 else -1]:  # which way goes first alternates from query to query
            started = time.perf_counter()
            results[name] = ways[name](text)
            samples[name].append(time.perf_counter() - started)
        if not np.array_equal(*results.values()):
            raise SystemExit(f"the two ways score {text!r} differently")
        postings.append(sum(int(index.postings.indptr[t + 1] - index.postings.indptr[t]) for t in index._token_ids(text)))
    print(f"{index.postings.size:,} chunks, {len(index.postings.vocabulary):,} terms; {len(texts)} queries, "
          f"median {int(np.median(postings)):,} postings a query; equal scores for every query\n")
    print("| chunk scores of a query | p50 (ms) | p99 (ms) |")
    print("|---|---|---|")
    for name, values in samples.items():
        ms = np.array(values) * 1000
        print(f"| {name} | {np.percentile(ms, 50):.2f} | {np.percentile(ms, 99):.2f} |")


if __name__ == "__main__":
    main()
