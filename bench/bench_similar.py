"""Similar-by-incident latency on a synthetic library, this tree's ranking next to another version's, or the
exact path next to the candidate path (``--paths``).

    python bench/bench_similar.py --size 10000 --queries 30 --before /path/to/old/incidentlib/search/similarity.py
    python bench/bench_similar.py --size 10000 --queries 30 --paths
    python bench/bench_similar.py --quality [--data LIB --labels LABELS.jsonl]

With ``--paths`` one :class:`~incidentlib.search.similarity.SimilarityIndex` scores every incident
(``candidate_threshold`` above the library's size) and one ranks candidates then exact evidence
(``candidate_threshold=0``, default pools), on the same engine and query incidents; their top-10 lists are
compared (share of the exact top 10 found, and of the exact best), and the memory each path's first
request added is reported (the candidate path first, so the exact path's copy of the vectors is its own).

With ``--quality`` every incident of a real library (default: the bundled one) is a query of both paths, the
candidate path forced (``candidate_threshold=0``, no exhaustive shortcut) with the default pools and with pools
cut to a fraction of the library; reported: the mean share of the exact top 10 each finds.  With ``--labels``
the label agreement (``incidentlib eval similar``, P@5) of each setting is reported too.

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
from incidentlib.search.similarity import Pools, SimilarityIndex


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
    parser.add_argument("--before", type=Path, help="the other version's similarity.py")
    parser.add_argument("--paths", action="store_true", help="the exact path next to the candidate path of this tree")
    parser.add_argument("--quality", action="store_true", help="top-10 agreement of the forced candidate path on a real library")
    parser.add_argument("--data", type=Path, help="--quality: the library (default: the bundled one)")
    parser.add_argument("--labels", help="--quality: labels for `eval similar` (P@5 per setting)")
    args = parser.parse_args()
    if args.quality:
        compare_quality(args.data, args.labels)
        return
    if args.paths:
        compare_paths(args.size, args.queries)
        return
    if args.before is None:
        parser.error("give --before or --paths")
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


SHARED = ("boilerplate", "_lexical", "_concepts", "_layout")  # built once, the same on both paths


def compare_paths(size: int, count: int) -> None:
    """Exact vs candidate path on one synthetic library (see the module docstring)."""
    import gc
    import os

    from bench_search import rss_mb

    copies = max(1, round(size / len(Library.open())))
    engine, tokens, _, _, incidents, _ = synthetic_engine(copies, noise=0.05, hnsw=False)
    del tokens
    similar_latency(engine, copies, 1)  # gives the engine the copied incident records
    ids = engine._incident_ids
    picked = [ids[round(i * (len(ids) - 1) / max(count - 1, 1))] for i in range(count)]
    indexes: dict[str, SimilarityIndex] = {}
    first: dict[str, float] = {}
    added: dict[str, float] = {}
    for name, threshold in (("candidates", 0), ("exact", 1 << 62)):
        gc.collect()
        before = rss_mb()
        index = SimilarityIndex(engine, candidate_threshold=threshold)
        if indexes:
            index.__dict__.update({key: indexes["candidates"].__dict__[key] for key in SHARED})
        started = time.perf_counter()
        index.rank(index.incident_query(engine.data.incidents[picked[0]]), 10)
        first[name] = time.perf_counter() - started
        gc.collect()
        added[name] = rss_mb() - before
        indexes[name] = index
    assert indexes["candidates"].uses_candidates and not indexes["exact"].uses_candidates
    samples: dict[str, list[float]] = {name: [] for name in indexes}
    overlap, best = [], []
    for incident_id in picked:
        lists = {}
        for name, index in indexes.items():
            started = time.perf_counter()
            ranked = index.rank(index.incident_query(engine.data.incidents[incident_id]), 10)
            samples[name].append(time.perf_counter() - started)
            lists[name] = [e.incident_id for e in ranked]
        overlap.append(len(set(lists["exact"]) & set(lists["candidates"])) / max(len(lists["exact"]), 1))
        best.append(float(lists["exact"][:1] == lists["candidates"][:1]))
    kept = len(indexes["exact"]._layout[0])
    sys.stdout.write(
        f"{incidents:,} incidents ({len(engine.chunks):,} chunks, {kept:,} kept passages), dense index "
        f"{engine.dense.index.kind}, {len(picked)} query incidents, load average {os.getloadavg()[0]:.1f} at the end\n\n"
        "| path | p50 (ms) | p99 (ms) | first request (s) | memory its first request added (MB) |\n|---|---|---|---|---|\n")
    for name, values in samples.items():
        sys.stdout.write(f"| {name} | {percentile_ms(values, 50):.1f} | {percentile_ms(values, 99):.1f} | {first[name]:.1f} "
                         f"| {added[name]:.0f} |\n")
    sys.stdout.write(f"\nratio of p50s, candidates ÷ exact: {np.median(samples['candidates']) / np.median(samples['exact']):.2f}; "
                     f"top-10 agreement (share of the exact top 10 found): {np.mean(overlap):.3f}; "
                     f"same best result: {np.mean(best):.3f}\n")


def quality_settings(size: int) -> dict[str, Pools]:
    """The exact path (None), the candidate path with the default pools, and with pools cut to a share of ``size``."""
    settings = {"candidates, default pools": Pools(exhaustive=0)}
    for share in (0.25, 0.1, 0.03):
        pool = max(1, round(share * size))
        settings[f"candidates, pools {pool}/{pool}/{max(1, pool // 2)} (dense/lexical/graph)"] = Pools(
            dense_hits=max(4, pool), dense=pool, lexical=pool, graph=max(1, pool // 2), exhaustive=0)
    return settings


def compare_quality(data: Path | None, labels: str | None) -> None:
    library = Library.open(data) if data else Library.open()
    service = library._search_service
    engine = service.engine
    exact = SimilarityIndex(engine)
    assert not exact.uses_candidates
    ids = exact.ids
    truth = {i: [e.incident_id for e in exact.rank(exact.incident_query(engine.data.incidents[i]), 10)] for i in ids}
    rows = []
    reports = {"exact": library.evaluate_similar(labels, k=5) if labels else None}
    for name, pools in quality_settings(len(ids)).items():
        index = SimilarityIndex(engine, candidate_threshold=0, pools=pools)
        overlap = [len(set(truth[i]) & {e.incident_id for e in index.rank(index.incident_query(engine.data.incidents[i]), 10)})
                   / max(len(truth[i]), 1) for i in ids]
        rows.append((name, float(np.mean(overlap)), float(np.min(overlap))))
        if labels:
            service.__dict__["similarity"] = index  # what `similar` ranks with in the evaluation
            reports[name] = library.evaluate_similar(labels, k=5)
            del service.__dict__["similarity"]
    sys.stdout.write(f"{library.root}: {len(ids)} incidents, each a query\n\n| setting | mean top-10 agreement with exact | lowest |\n|---|---|---|\n")
    for name, mean, low in rows:
        sys.stdout.write(f"| {name} | {mean:.3f} | {low:.1f} |\n")
    if labels:
        sys.stdout.write("\n| setting | similar (incident) P@5 | MAP | similar (text) P@5 | MAP |\n|---|---|---|---|---|\n")
        for name, report in reports.items():
            assert report is not None
            methods = {m.method: m for m in report.methods}
            a, b = methods["similar (incident)"], methods["similar (text)"]
            sys.stdout.write(f"| {name} | {a.p_at_k:.3f} | {a.map:.3f} | {b.p_at_k:.3f} | {b.map:.3f} |\n")


if __name__ == "__main__":
    main()
