"""A hybrid query's BM25 leg on the engine's worker thread: same rankings as the legs one after the other,
one worker per engine, gone after close (real BM25 postings, real FAISS, an instant fake embedder)."""

from __future__ import annotations

import gc
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib.loader import load_library
from incidentlib.search import dense
from incidentlib.search.chunks import Chunk
from incidentlib.search.engine import Hit, SearchConfig, SearchEngine, SearchMode
from incidentlib.search.lexical import LexicalIndex, postings_from_tokens
from incidentlib.search.store import FORMAT_VERSION, IndexMeta, LoadedIndex
from incidentlib.search.tokenize import tokenize

REPO = Path(__file__).resolve().parent.parent
WORKER = "incidentlib-search-leg"
#: Copies of the bundled chunks in the larger synthetic index (about 35k chunks).
COPIES = 8
IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002"]


def eval_queries(limit: int | None = None) -> list[str]:
    lines = (REPO / "eval" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines[:limit]]


def leg_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER)]


def sequential(engine: SearchEngine) -> SearchConfig:
    return engine.config.model_copy(update={"concurrent_legs": False})


def rank_both(engine: SearchEngine, queries: list[str], **kwargs: object) -> tuple[list[list[Hit]], list[list[Hit]]]:
    """Each query searched with the legs concurrently and then one after the other (the engine's config swapped)."""
    concurrent_config = engine.config
    assert concurrent_config.concurrent_legs
    together = [engine.search(q, **kwargs) for q in queries]  # type: ignore[arg-type]
    engine.config = sequential(engine)
    try:
        apart = [engine.search(q, **kwargs) for q in queries]  # type: ignore[arg-type]
    finally:
        engine.config = concurrent_config
    return together, apart


def new_engine(root: Path, cache: Path) -> SearchEngine:
    engine = SearchEngine(load_library(root), SearchConfig(cache_dir=cache), HashEmbedder())
    engine.build()
    _ = engine.lexical
    return engine


@pytest.fixture(scope="module")
def small(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_library(tmp_path_factory.mktemp("small") / "library", data_dir, IDS)


@pytest.fixture(scope="module")
def bundled(small: Path, tmp_path_factory: pytest.TempPathFactory) -> SearchEngine:
    """The small library's engine, shared by the fast tests (the bundled library's takes seconds to build)."""
    return new_engine(small, tmp_path_factory.mktemp("cache"))


def assert_same_both_ways(engine: SearchEngine, queries: list[str]) -> None:
    from incidentlib.search.fusion import FusionMethod

    allowed = set(list(engine.data.incidents)[::3])
    together, apart = rank_both(engine, queries, k=10)
    assert together == apart  # incidents, scores (bit for bit), chunks and both ranks
    assert sum(len(hits) for hits in together) >= min(9, len(engine.data.incidents)) * len(queries) // 2
    assert any(h.lexical_rank and h.dense_rank for hits in together for h in hits)  # both legs contributed
    for kwargs in ({"k": 50, "allowed": allowed}, {"k": 3, "fusion": FusionMethod.rrf}, {"k": 100}):
        together, apart = rank_both(engine, queries, **kwargs)
        assert together == apart
        if "allowed" in kwargs:
            assert all(h.incident_id in allowed for hits in together for h in hits)


def test_concurrent_legs_rank_exactly_as_sequential_ones(bundled: SearchEngine) -> None:
    assert_same_both_ways(bundled, eval_queries(60))


@pytest.mark.slow
def test_concurrent_legs_rank_exactly_as_sequential_ones_on_the_bundled_library(data_dir: Path, tmp_path: Path) -> None:
    engine = new_engine(data_dir, tmp_path / "cache")
    try:
        assert_same_both_ways(engine, eval_queries())
    finally:
        engine.close()


def test_the_bm25_leg_runs_on_the_engine_worker(bundled: SearchEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    where: dict[str, str] = {}
    original_lexical, original_dense = bundled.local_rank_lexical, bundled.local_rank_dense_vector

    def lexical(*args: Any, **kwargs: Any) -> Any:
        where["lexical"] = threading.current_thread().name
        return original_lexical(*args, **kwargs)

    def dense_leg(*args: Any, **kwargs: Any) -> Any:
        where["dense"] = threading.current_thread().name
        return original_dense(*args, **kwargs)

    monkeypatch.setattr(bundled, "local_rank_lexical", lexical)
    monkeypatch.setattr(bundled, "local_rank_dense_vector", dense_leg)
    bundled.search("NCCL timeout during all-reduce", k=10)
    assert where["lexical"].startswith(WORKER) and where["dense"] == threading.current_thread().name
    bundled.config = sequential(bundled)
    try:
        bundled.search("NCCL timeout during all-reduce", k=10)
    finally:
        bundled.config = bundled.config.model_copy(update={"concurrent_legs": True})
    assert where["lexical"] == where["dense"] == threading.current_thread().name
    # lexical-only and dense-only searches never involve the worker
    where.clear()
    bundled.search("NCCL timeout", k=10, mode=SearchMode.lexical)
    assert where == {"lexical": threading.current_thread().name}


def test_many_callers_at_once_get_the_sequential_rankings(bundled: SearchEngine) -> None:
    """Callers that find the worker busy run both legs themselves; every answer is still the sequential one."""
    queries = eval_queries(48)
    _, expected = rank_both(bundled, queries, k=10)
    before = set(leg_threads())  # other tests' engines may still hold their own worker
    with ThreadPoolExecutor(max_workers=6) as callers:
        got = list(callers.map(lambda q: bundled.search(q, k=10), queries))
    assert got == expected
    started = [t for t in leg_threads() if t not in before and t.is_alive()]
    assert len(started) <= 1  # one worker for the engine, not one per caller
    pool = bundled._legs
    assert pool is not None and len(pool._threads) == 1  # the engine keeps a single worker thread


def test_close_stops_the_worker_and_the_engine_still_answers(small: Path, tmp_path: Path) -> None:
    before = set(leg_threads())
    engine = new_engine(small, tmp_path / "cache")
    queries = eval_queries(5)
    first = [engine.search(q, k=10) for q in queries]
    started = [t for t in leg_threads() if t not in before]
    assert len(started) == 1 and started[0].is_alive()
    engine.close()
    assert not started[0].is_alive()
    assert [engine.search(q, k=10) for q in queries] == first  # the legs in turn now, same answers
    assert set(leg_threads()) <= before  # closed stays closed: no worker started again
    engine.close()  # twice is harmless


def test_an_engine_dropped_without_close_leaves_no_thread(small: Path, tmp_path: Path) -> None:
    before = set(leg_threads())
    engine = new_engine(small, tmp_path / "cache")
    engine.search("GPU Xid 79 fell off the bus", k=5)
    started = [t for t in leg_threads() if t not in before]
    assert len(started) == 1
    del engine
    gc.collect()  # the pool's worker exits once the pool is collected with its engine
    started[0].join(timeout=5)
    assert not started[0].is_alive()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_concurrent_legs_rank_exactly_as_sequential_ones_on_a_larger_synthetic_index(data_dir: Path, kind: str) -> None:
    """Copies of the bundled chunks (texts carry the copy number, vectors are perturbed copies) under
    each dense index kind: every evaluation query ranks the same both ways, filtered and not."""
    real = SearchEngine(load_library(data_dir), SearchConfig(), HashEmbedder())
    real_chunks = real.chunks
    real_vectors = HashEmbedder().encode_documents([c.text for c in real_chunks])
    real_tokens = [tokenize(c.text) for c in real_chunks]
    rng = np.random.default_rng(7)
    chunks, tokens, blocks, incidents = [], [], [], {}
    for copy in range(COPIES):
        for chunk, chunk_tokens in zip(real_chunks, real_tokens, strict=True):
            incident_id = chunk.incident_id if copy == 0 else f"{chunk.incident_id}-{copy}"
            incidents[incident_id] = None
            chunks.append(Chunk(id=f"{incident_id}/{chunk.id.split('/', 1)[1]}", incident_id=incident_id, kind=chunk.kind,
                                lang=chunk.lang, text=chunk.text + (f" #{copy}" if copy else "")))
            tokens.append([*chunk_tokens, str(copy)] if copy else chunk_tokens)
        block = real_vectors + (rng.normal(scale=0.05, size=real_vectors.shape).astype(np.float32) if copy else 0)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        blocks.append(block / np.where(norms > 0, norms, 1.0))  # a chunk without words embeds to zeros
    vectors = np.vstack(blocks).astype(np.float32)
    thresholds = {"flat": (10**9, 10**9), "hnsw": (1000, 10**9), "ivf": (1000, 2000)}[kind]
    index = dense.create(vectors, *thresholds)
    assert index.kind == kind
    engine = SearchEngine(SimpleNamespace(incidents=incidents, root=REPO, content_hash="synthetic"),  # type: ignore[arg-type]
                          SearchConfig(hnsw_threshold=thresholds[0], ivf_threshold=thresholds[1]), HashEmbedder())
    engine.__dict__.update(chunks=chunks, lexical=LexicalIndex(postings=postings_from_tokens(iter(tokens), len(tokens))))
    meta = IndexMeta(format_version=FORMAT_VERSION, embedder="fake-hash", dim=vectors.shape[1], content_hash="synthetic",
                     chunks=len(chunks), index_kind=kind, build="synthetic", built_at=0.0)
    engine.use_index(LoadedIndex(index, [c.id for c in chunks], meta))
    queries = eval_queries(60)
    allowed = set(list(incidents)[::5])
    try:
        for kwargs in ({"k": 10}, {"k": 50, "allowed": allowed}):
            together, apart = rank_both(engine, queries, **kwargs)
            assert together == apart
            assert sum(len(hits) for hits in together) >= 9 * len(queries)
    finally:
        engine.close()


def naive_top(chunk_incident: list[int], scores: np.ndarray, incidents: int, depth: int | None, positive: bool,
              allowed: set[int] | None) -> list[tuple[int, float, int]]:
    """Reference: an incident's score is its best chunk's, its chunk the earliest with that score; ties to the
    earlier incident; positive scores only when ``positive``; every chunk looked at in Python."""
    best: dict[int, tuple[float, int]] = {}
    for chunk, incident in enumerate(chunk_incident):
        if allowed is not None and incident not in allowed:
            continue
        score = float(scores[chunk])
        if incident not in best or score > best[incident][0]:
            best[incident] = (score, chunk)
    rows = [(i, s, c) for i, (s, c) in best.items() if (s > 0 if positive else np.isfinite(s))]
    rows.sort(key=lambda row: (-row[1], row[0]))
    return rows[:depth] if depth is not None else rows


@pytest.mark.parametrize("grouped", [True, False])
def test_incident_ranking_and_best_chunks_match_a_per_chunk_reference(grouped: bool) -> None:
    rng = np.random.default_rng(3)
    incidents = 300
    chunk_incident = np.sort(rng.integers(0, incidents, 4000)) if grouped else rng.integers(0, incidents, 4000)
    ids = [f"I{i}" for i in range(incidents)]
    engine = SearchEngine(SimpleNamespace(incidents=dict.fromkeys(ids)), SearchConfig(), HashEmbedder())  # type: ignore[arg-type]
    engine.__dict__.update(_chunk_incident=chunk_incident.astype(np.int64), _incident_ids=ids)
    assert engine._incident_chunks[2] is grouped
    for trial in range(20):
        # few distinct values: many ties between chunks of an incident and between incidents
        scores = rng.integers(-3, 6, len(chunk_incident)).astype(np.float32)
        depth = [None, 1, 10, 50, 1000][trial % 5]
        allowed = None if trial % 3 else set(range(0, incidents, 4))
        for positive in (True, False):
            got = engine._top_incidents(scores, depth, None if allowed is None else {ids[i] for i in allowed}, positive)
            want = naive_top(chunk_incident.tolist(), scores, incidents, depth, positive, allowed)
            assert got == [(ids[i], s, c) for i, s, c in want]
            assert got and all(type(s) is float and type(c) is int for _, s, c in got)


def test_approximate_hits_aggregate_to_the_best_chunk_per_incident_cut_to_depth() -> None:
    rng = np.random.default_rng(5)
    incidents = 60
    chunk_incident = np.sort(rng.integers(0, incidents, 900)).astype(np.int64)
    ids = [f"I{i}" for i in range(incidents)]
    engine = SearchEngine(SimpleNamespace(incidents=dict.fromkeys(ids)), SearchConfig(), HashEmbedder())  # type: ignore[arg-type]
    engine.__dict__.update(_chunk_incident=chunk_incident, _incident_ids=ids)
    for depth in (1, 5, 50, 100):
        found = rng.choice(len(chunk_incident), 300, replace=False)
        scores = rng.integers(0, 40, 300).astype(np.float32)
        got = engine._aggregate(found, scores, depth)
        best: dict[int, tuple[float, int, int]] = {}  # incident -> (score, position in the hits, chunk)
        for position, (chunk, score) in enumerate(zip(found.tolist(), scores.tolist(), strict=True)):
            incident = int(chunk_incident[chunk])
            if incident not in best or score > best[incident][0]:
                best[incident] = (score, position, chunk)
        want = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))[:depth]  # ties: the earlier incident
        assert [(i, s) for i, s, _ in got] == [(ids[i], s) for i, (s, _, _) in want]
        assert [c for _, _, c in got] == [c for _, (_, _, c) in want]
