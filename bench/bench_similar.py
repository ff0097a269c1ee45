"""Similar-by-incident latency on a synthetic library, this tree's ranking next to another version's, or the
exact path next to the candidate path (``--paths``).

    python bench/bench_similar.py --size 10000 --queries 30 --before /path/to/old/incidentlib/search/similarity.py
    python bench/bench_similar.py --size 10000 --queries 30 --paths [--before OLD/similarity.py] [--profile 30] [--ivf]
    python bench/bench_similar.py --quality [--data LIB --labels LABELS.jsonl]
    python bench/bench_similar.py --size 100000 --queries 30 --candidates-only --passes 3 --cache DIR [--before-ivf OLD/ivf.py]

With ``--paths`` one :class:`~incidentlib.search.similarity.SimilarityIndex` scores every incident
(``candidate_threshold`` above the library's size) and one ranks candidates then exact evidence
(``candidate_threshold=0``, default pools), on the same engine and query incidents; their top-10 lists are
compared (share of the exact top 10 found, and of the exact best), and the memory each path's first
request added is reported (the candidate path first, so the exact path's copy of the vectors is its own).
With ``--before`` the other version's candidate path runs beside them on the same queries (p50/p99 side by
side, its own top-10 agreement with the exact path).  The first request is timed three ways: the other
version's (builds everything in memory), this tree's with no saved similarity artefact (builds and saves it),
and this tree's after a restart (a new index over the same engine and cache folder: loads the artefact).
``--profile N`` runs cProfile over N candidate-path queries after the timings; ``--ivf`` gives the synthetic
engine the inverted file at any size (it gets one from 1M vectors), to try the 100k library's index on a
smaller one.

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
import contextlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_search import REPO, percentile_ms, similar_latency, synthetic_engine

from incidentlib import Library
from incidentlib.search import dense
from incidentlib.search.engine import SearchEngine
from incidentlib.search.similarity import Pools, SimilarityIndex


def load_module(path: Path, name: str) -> Any:
    """Another version's module file, imported as ``name`` inside this package (its relative imports resolve)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def load_version(path: Path) -> type:
    """``SimilarityIndex`` from another version's ``similarity.py``, imported inside this package."""
    cls: type = load_module(path, "incidentlib.search._similarity_before").SimilarityIndex
    return cls


def similarity_engine(size: int, ivf: bool, keep: Path | None) -> tuple[SearchEngine, int, Path]:
    """The synthetic library of about ``size`` incidents (records copied in), its incident count, and the folder its
    similarity artefact goes to (``keep``, else a new temporary folder the caller removes), not the user's cache."""
    import tempfile

    if ivf:
        force_ivf()
    copies = max(1, round(size / len(Library.open())))
    engine, tokens, _, _, incidents, _ = synthetic_engine(copies, noise=0.05, hnsw=False)
    del tokens
    copy_records(engine, copies)
    cache = keep if keep is not None else Path(tempfile.mkdtemp(prefix="bench-similar-"))
    cache.mkdir(parents=True, exist_ok=True)
    engine.config = engine.config.model_copy(update={"cache_dir": cache})
    return engine, incidents, cache


def candidates_alone(size: int, count: int, passes: int, ivf: bool, keep: Path | None, before_ivf: Path | None = None) -> None:
    """The candidate path's latency on its own, warm: the first request (which loads or builds the similarity
    artefact, in ``keep`` when given) and one pass over the ``count`` query incidents are not timed; then
    ``passes`` timed passes over the same queries, p50/p99 each.  ``--paths`` times the candidate path in turn with
    the exact one, whose copy of every vector competes for the page cache the candidate path reads its rows from.

    With ``before_ivf`` (another version's ``ivf.py``) three settings take turns query by query on the same index:
    that version's row reading with the code search on one thread, this tree's row reading on one thread, and this
    tree as it is (the code search over :data:`~incidentlib.search.ivf.SEARCH_THREADS`), each query first in a
    rotating order; their top-10 lists must be equal."""
    import shutil

    from incidentlib.search import ivf as ivf_module

    engine, incidents, cache = similarity_engine(size, ivf, keep)
    ids = engine._incident_ids
    picked = [engine.data.incidents[ids[round(i * (len(ids) - 1) / max(count - 1, 1))]] for i in range(count)]
    index = SimilarityIndex(engine, candidate_threshold=0)
    settings: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {"this tree": contextlib.nullcontext}
    if before_ivf is not None:
        old = load_module(before_ivf, "incidentlib.search._ivf_before")
        settings = {"before: its row reading, code search on 1 thread": lambda: patched(
                        ivf_module, search_threads=1, row_reader=old._RowReader.rows, index_rows=old.IvfIndex.rows),
                    "row reading of this tree, code search on 1 thread": lambda: patched(ivf_module, search_threads=1),
                    **settings}
    for incident in picked:  # warm: the artefact, the lazily built parts and the pages the queries read
        for setting in settings.values():
            with setting():
                index.rank(index.incident_query(incident), 10)
    sys.stdout.write(f"{incidents:,} incidents ({len(engine.chunks):,} chunks), dense index {engine.dense.index.describe()}, "
                     f"{count} query incidents, candidate path alone after one untimed pass"
                     f"{', settings in turn query by query' if len(settings) > 1 else ''}\n\n"
                     "| pass | setting | p50 (ms) | p99 (ms) |\n|---|---|---|---|\n")
    for number in range(1, passes + 1):
        samples: dict[str, list[float]] = {name: [] for name in settings}
        names = list(settings)
        for turn, incident in enumerate(picked):
            answers = []
            # the order rotates query by query: a setting that ran the same query just before finds its rows in the CPU caches
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                with settings[name]():
                    started = time.perf_counter()
                    ranked = index.rank(index.incident_query(incident), 10)
                    samples[name].append(time.perf_counter() - started)
                answers.append([(e.incident_id, e.chunk, round(e.score, 9)) for e in ranked])
            if any(answer != answers[0] for answer in answers):
                raise SystemExit(f"the settings disagree on {incident.id}")
        for name, values in samples.items():
            sys.stdout.write(f"| {number} | {name} | {percentile_ms(values, 50):.1f} | {percentile_ms(values, 99):.1f} |\n")
        sys.stdout.flush()
    sys.stdout.write(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if keep is None:
        shutil.rmtree(cache, ignore_errors=True)


@contextlib.contextmanager
def patched(module: Any, search_threads: int, row_reader: Any = None, index_rows: Any = None) -> Iterator[None]:
    """``ivf``'s thread bound, and optionally its row-reading methods, replaced for the block."""
    saved = (module.SEARCH_THREADS, module._RowReader.rows, module.IvfIndex.rows)
    module.SEARCH_THREADS = search_threads
    if row_reader is not None:
        module._RowReader.rows = row_reader
    if index_rows is not None:
        module.IvfIndex.rows = index_rows
    try:
        yield
    finally:
        module.SEARCH_THREADS, module._RowReader.rows, module.IvfIndex.rows = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10000, help="library size in incidents")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--before", type=Path, help="the other version's similarity.py")
    parser.add_argument("--paths", action="store_true", help="the exact path next to the candidate path of this tree")
    parser.add_argument("--quality", action="store_true", help="top-10 agreement of the forced candidate path on a real library")
    parser.add_argument("--data", type=Path, help="--quality: the library (default: the bundled one)")
    parser.add_argument("--labels", help="--quality: labels for `eval similar` (P@5 per setting)")
    parser.add_argument("--profile", type=int, default=0, help="--paths: cProfile this many candidate-path queries")
    parser.add_argument("--ivf", action="store_true", help="--paths: the inverted file as the dense index at any size")
    parser.add_argument("--share-before", action="store_true", help="--paths --before: the other version takes the "
                        "parts this one loaded instead of building its own (less memory; its first request is not timed)")
    parser.add_argument("--full-lexical", action="store_true", help="--paths: also the candidate path reading every query "
                        "term's whole column (Pools.prune_lexical=False: no MaxScore, exact lexical statistics)")
    parser.add_argument("--cache", type=Path, help="--paths: keep the similarity artefact in this folder (a second run "
                        "loads it instead of building it for minutes)")
    parser.add_argument("--candidates-only", action="store_true", help="the candidate path alone, warm: one untimed pass "
                        "over the queries, then --passes timed ones (no exact path interleaved to share the page cache)")
    parser.add_argument("--passes", type=int, default=3, help="--candidates-only: timed passes")
    parser.add_argument("--before-ivf", type=Path, help="--candidates-only: another version's ivf.py; its row reading with "
                        "the code search on one thread, this tree's on one thread, and this tree, query by query in turn")
    parser.add_argument("--probe-shares", default="", help="--paths: also the candidate path at these shares of the inverted "
                        "file's nprobe, comma-separated (Pools.probe_share)")
    args = parser.parse_args()
    if args.quality:
        compare_quality(args.data, args.labels)
        return
    if args.candidates_only:
        candidates_alone(args.size, args.queries, args.passes, args.ivf, args.cache, args.before_ivf)
        return
    if args.paths:
        shares = [float(x) for x in args.probe_shares.split(",") if x.strip()]
        compare_paths(args.size, args.queries, args.before, args.profile, args.ivf, shares, args.share_before, args.full_lexical,
                      args.cache)
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


def copy_records(engine: SearchEngine, copies: int) -> None:
    """Give the synthetic engine its incident records: copies of the real ones under the synthetic ids (what
    ``bench_search.similar_latency`` does, without its first request)."""
    real = Library.open().data
    copied = {}
    for copy in range(copies):
        for incident in real.incidents.values():
            incident_id = incident.id if copy == 0 else f"{incident.id}-{copy}"
            copied[incident_id] = incident if copy == 0 else incident.model_copy(update={"id": incident_id})
    engine.data = SimpleNamespace(incidents={i: copied[i] for i in engine._incident_ids}, vocab=real.vocab,
                                  root=REPO, content_hash="synthetic")


def force_ivf() -> None:
    """Every dense index the synthetic engine builds is an inverted file (``kind_for``'s IVF threshold 0)."""
    hnsw_threshold, _ = dense.kind_for.__defaults__ or (dense.DEFAULT_HNSW_THRESHOLD, 0)
    dense.kind_for.__defaults__ = (hnsw_threshold, 0)
    dense.create.__defaults__ = (hnsw_threshold, 0)


def settle() -> None:
    """Collect garbage and hand freed heap pages back to the system, so resident memory counts what is held."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def compare_paths(size: int, count: int, before: Path | None = None, profile: int = 0, ivf: bool = False,
                  shares: list[float] | None = None, share_before: bool = False, full_lexical: bool = False,
                  keep: Path | None = None) -> None:
    """Exact vs candidate path on one synthetic library (see the module docstring)."""
    import cProfile
    import pstats
    import shutil

    from bench_search import rss_mb

    engine, incidents, cache = similarity_engine(size, ivf, keep)
    ids = engine._incident_ids
    picked = [ids[round(i * (len(ids) - 1) / max(count - 1, 1))] for i in range(count)]
    first_query = engine.data.incidents[picked[0]]
    indexes: dict[str, SimilarityIndex] = {}
    first: dict[str, float] = {}
    added: dict[str, float] = {}

    def first_request(name: str, index: SimilarityIndex) -> None:
        settle()
        rss = rss_mb()
        started = time.perf_counter()
        index.rank(index.incident_query(first_query), 10)
        first[name] = time.perf_counter() - started
        settle()
        added[name] = rss_mb() - rss

    if before is not None and not share_before:
        old = load_version(before)(engine, candidate_threshold=0)
        first_request("candidates (before)", old)
        indexes["candidates (before)"] = old
    first_request("candidates: build and save", SimilarityIndex(engine, candidate_threshold=0))
    restarted = SimilarityIndex(engine, candidate_threshold=0)  # a new process over the same cache folder
    first_request("candidates", restarted)
    indexes["candidates"] = restarted
    if before is not None and share_before:  # the other version ranks with the parts this one loaded (same values)
        old = load_version(before)(engine, candidate_threshold=0)
        old.__dict__.update({key: restarted.__dict__[key] for key in (*SHARED, "_lexical_columns") if key in restarted.__dict__})
        first_request("candidates (before), parts shared", old)
        indexes = {"candidates (before)": old, **indexes}
    for share in shares or []:
        other = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(probe_share=share))
        other.__dict__.update({key: restarted.__dict__[key] for key in ("_artefact", *SHARED) if key in restarted.__dict__})
        first_request(f"candidates, probe share {share}", other)
        indexes[f"candidates, probe share {share}"] = other
    if full_lexical:
        other = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(prune_lexical=False))
        other.__dict__.update({key: restarted.__dict__[key] for key in ("_artefact", *SHARED) if key in restarted.__dict__})
        first_request("candidates, full lexical columns", other)
        indexes["candidates, full lexical columns"] = other
    exact = SimilarityIndex(engine, candidate_threshold=1 << 62)
    exact.__dict__.update({key: restarted.__dict__[key] for key in SHARED if key in restarted.__dict__})
    first_request("exact", exact)
    indexes["exact"] = exact
    assert restarted.uses_candidates and not exact.uses_candidates
    samples: dict[str, list[float]] = {name: [] for name in indexes}
    overlap: dict[str, list[float]] = {name: [] for name in indexes if name != "exact"}
    best: dict[str, list[float]] = {name: [] for name in overlap}
    names = list(indexes)
    for turn, incident_id in enumerate(picked):
        lists = {}
        for name in names[turn % len(names):] + names[:turn % len(names)]:  # each goes first in turn: no order effect
            index = indexes[name]
            started = time.perf_counter()
            ranked = index.rank(index.incident_query(engine.data.incidents[incident_id]), 10)
            samples[name].append(time.perf_counter() - started)
            lists[name] = [e.incident_id for e in ranked]
        for name in overlap:
            overlap[name].append(len(set(lists["exact"]) & set(lists[name])) / max(len(lists["exact"]), 1))
            best[name].append(float(lists["exact"][:1] == lists[name][:1]))
    kept = len(exact._layout[0])
    sys.stdout.write(
        f"{incidents:,} incidents ({len(engine.chunks):,} chunks, {kept:,} kept passages), dense index "
        f"{engine.dense.index.describe()}, {len(picked)} query incidents, load average {os.getloadavg()[0]:.1f} at the end\n\n"
        "| path | p50 (ms) | p99 (ms) | top-10 agreement with exact | same best |\n|---|---|---|---|---|\n")
    for name in names:
        values = samples[name]
        agreement = f"{np.mean(overlap[name]):.3f} | {np.mean(best[name]):.3f}" if name in overlap else "— | —"
        sys.stdout.write(f"| {name} | {percentile_ms(values, 50):.1f} | {percentile_ms(values, 99):.1f} | {agreement} |\n")
    sys.stdout.write("\n| first request | seconds | memory it added (MB) |\n|---|---|---|\n")
    for name, seconds in first.items():
        sys.stdout.write(f"| {name} | {seconds:.1f} | {added[name]:.0f} |\n")
    sys.stdout.write(f"\nratio of p50s, candidates ÷ exact: {np.median(samples['candidates']) / np.median(samples['exact']):.2f}\n")
    if "candidates, full lexical columns" in samples:
        sys.stdout.write(f"ratio of p50s, candidates ÷ candidates with full lexical columns: "
                         f"{np.median(samples['candidates']) / np.median(samples['candidates, full lexical columns']):.2f}\n")
    if "candidates (before)" in samples:
        sys.stdout.write(f"ratio of p50s, candidates ÷ candidates (before): "
                         f"{np.median(samples['candidates']) / np.median(samples['candidates (before)']):.2f}\n")
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for incident_id in picked[:profile]:
            restarted.rank(restarted.incident_query(engine.data.incidents[incident_id]), 10)
        profiler.disable()
        sys.stdout.write(f"\ncProfile, candidate path, {min(profile, len(picked))} queries:\n")
        pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(25)
    if keep is None:
        shutil.rmtree(cache, ignore_errors=True)


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
