"""Similar-by-incident latency on a synthetic library, this tree's ranking next to another version's.

    python bench/bench_similar.py --size 10000 --queries 30 --before /path/to/old/incidentlib/search/similarity.py

The library is the one ``bench_search.py`` builds (copies of the real incidents with perturbed real
vectors; exact dense index, no floor, no peer).  Both versions of
:class:`~incidentlib.search.similarity.SimilarityIndex` run on the same engine and the same query
incidents, query by query in turn, and their top-10 lists are compared (they must be equal).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import percentile_ms, similar_latency, synthetic_engine

from incidentlib import Library
from incidentlib.search.similarity import SimilarityIndex


def load_version(path: Path) -> type:
    """``SimilarityIndex`` from another version's ``similarity.py``, imported inside this package."""
    spec = importlib.util.spec_from_file_location("incidentlib.search._similarity_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    cls: type = module.SimilarityIndex
    return cls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10000, help="library size in incidents")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--before", type=Path, required=True, help="the other version's similarity.py")
    args = parser.parse_args()
    copies = max(1, round(args.size / len(Library.open())))
    engine, tokens, _, _, incidents, _ = synthetic_engine(copies, noise=0.05, hnsw=False)
    del tokens
    similar_latency(engine, copies, 1)  # gives the engine the copied incident records
    indexes = {"before": load_version(args.before)(engine), "after": SimilarityIndex(engine)}
    ids = engine._incident_ids
    picked = [ids[round(i * (len(ids) - 1) / max(args.queries - 1, 1))] for i in range(args.queries)]
    first = {}
    for name, index in indexes.items():
        started = time.perf_counter()
        index.rank(index.incident_query(engine.data.incidents[picked[0]]), 10)
        first[name] = time.perf_counter() - started
    samples: dict[str, list[float]] = {name: [] for name in indexes}
    for incident_id in picked:
        answers = []
        for name, index in indexes.items():
            started = time.perf_counter()
            ranked = index.rank(index.incident_query(engine.data.incidents[incident_id]), 10)
            samples[name].append(time.perf_counter() - started)
            answers.append([(e.incident_id, e.chunk, round(e.score, 9)) for e in ranked])
        if answers[0] != answers[1]:
            raise SystemExit(f"the versions disagree on {incident_id}: {answers}")
    sys.stdout.write(f"{incidents:,} incidents ({len(engine.chunks):,} chunks), {len(picked)} query incidents, "
                     "same top-10 lists from both versions\n\n| version | p50 (ms) | p99 (ms) | first request (s) |\n|---|---|---|---|\n")
    for name, values in samples.items():
        sys.stdout.write(f"| {name} | {percentile_ms(values, 50):.1f} | {percentile_ms(values, 99):.1f} | {first[name]:.1f} |\n")
    sys.stdout.write(f"\nratio of p50s, after ÷ before: {np.median(samples['after']) / np.median(samples['before']):.2f}\n")


if __name__ == "__main__":
    main()
