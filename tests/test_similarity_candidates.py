"""``similar`` on large libraries: candidates from the dense index, the lexical and the concept columns, then
exact evidence on the pool (forced here on a small library by ``candidate_threshold=0``), next to the exact path;
and the batch search / row fetch every dense index offers for it."""

from __future__ import annotations

import os
from pathlib import Path

import faiss
import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib import Library
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.search import ivf as ivf_module
from incidentlib.search.engine import SearchEngine
from incidentlib.search.exact import ExactIndex
from incidentlib.search.hnsw import HnswIndex
from incidentlib.search.ivf import IvfIndex
from incidentlib.search.layered import LayeredIndex
from incidentlib.search.lexical_top import lexical_top
from incidentlib.search.similarity import Evidence, Pools, SimilarityIndex, _column_stats, _mean_std, one_blas_thread

SIZE = 48  # incidents of the bundled library in the test library: several per cause, a second to build


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> SearchEngine:
    folder = tmp_path_factory.mktemp("candidates")
    ids = sorted(p.stem for p in (data_dir / "incidents").glob("*.yaml"))[:SIZE]
    library = Library(load_library(small_library(folder / "lib", data_dir, ids)), SearchConfig(cache_dir=folder / "cache"),
                      embedder=HashEmbedder())
    library.build_index()
    return library._search_service.engine


def ranked(index: SimilarityIndex, incident_id: str, k: int, allowed: set[str] | None = None) -> list[Evidence]:
    return index.rank(index.incident_query(index.data.incidents[incident_id]), k, allowed)


def same(a: list[Evidence], b: list[Evidence]) -> None:
    assert [e.incident_id for e in a] == [e.incident_id for e in b]
    for x, y in zip(a, b, strict=True):
        assert (x.chunk, x.terms, x.shared, x.ranks) == (y.chunk, y.terms, y.shared, y.ranks)
        # dense values are float32 products whose rounding depends on the BLAS kernel and thread count (the candidate
        # path runs on one thread): ~1e-7, which the z-score divides by the dense deviation
        assert x.score == pytest.approx(y.score, abs=1e-5) and x.dense == pytest.approx(y.dense, abs=1e-6)
        assert (x.lexical, x.graph) == (pytest.approx(y.lexical, abs=1e-12), pytest.approx(y.graph, abs=1e-12))


def test_pools_that_cover_every_incident_give_the_exact_ranking(engine: SearchEngine) -> None:
    exact = SimilarityIndex(engine)
    covering = Pools(dense_hits=len(engine.dense.index), dense=SIZE, lexical=SIZE, graph=SIZE, sample=SIZE, exhaustive=0)
    candidates = SimilarityIndex(engine, candidate_threshold=0, pools=covering)
    assert candidates.uses_candidates and not exact.uses_candidates
    for incident_id in exact.ids:
        same(ranked(candidates, incident_id, 10), ranked(exact, incident_id, 10))
    text = "The GPU fell off the bus and NCCL collectives timed out during training."
    same(candidates.rank(candidates.text_query(text, {}, set()), 5), exact.rank(exact.text_query(text, {}, set()), 5))
    allowed = set(exact.ids[::3])  # a filter: the exhaustive shortcut of the default pools
    shortcut = SimilarityIndex(engine, candidate_threshold=0)
    same(ranked(shortcut, exact.ids[1], 5, allowed), ranked(exact, exact.ids[1], 5, allowed))


def test_collection_statistics_are_those_of_every_candidate(engine: SearchEngine) -> None:
    index = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(sample=SIZE))
    query = index.incident_query(index.data.incidents[index.ids[4]])
    column = index._lexical_column(query.terms)
    assert np.allclose(column, index._lexical_scores(query.terms))  # the terms' columns add up to the full product
    assert np.allclose(index._graph_column(query.concepts), index._graph_scores(query.concepts))
    mask = np.ones(len(index.ids), dtype=bool)
    mask[4] = False
    assert _column_stats(column, mask, 4, restricted=False) == pytest.approx(_mean_std(column[mask]), abs=1e-12)
    mask[::2] = False
    assert _column_stats(column, mask, 4, restricted=True) == pytest.approx(_mean_std(column[mask]), abs=1e-12)
    dense, _ = index._dense_on(query.passages, np.flatnonzero(mask))
    assert index._dense_stats(query.passages, mask, dense[:1]) == pytest.approx(_mean_std(dense), abs=1e-6)  # sample = all


def test_small_pools_still_find_the_exact_head(engine: SearchEngine) -> None:
    exact = SimilarityIndex(engine)
    small = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(dense_hits=8, dense=6, lexical=6, graph=3, sample=16, exhaustive=0))
    top1, overlap = 0, 0.0
    for incident_id in exact.ids:
        truth = [e.incident_id for e in ranked(exact, incident_id, 5)]
        found = ranked(small, incident_id, 5)
        assert len(found) == 5 and incident_id not in [e.incident_id for e in found]
        assert all(set(e.ranks) == set(found[0].ranks) and max(e.ranks.values()) <= 15 for e in found)  # ranks among the pool
        top1 += truth[0] in [e.incident_id for e in found]
        overlap += len(set(truth) & {e.incident_id for e in found}) / 5
    # pools of at most 15 of 47 candidates: the exact best is kept for nearly every query (measured 48 of 48), most of
    # the top 5 too (measured 0.92; dense pools alone, 0.45 and 27 of 48)
    assert top1 >= 0.95 * SIZE
    assert overlap / SIZE >= 0.85


def test_the_candidate_path_keeps_no_copy_of_the_passage_vectors(engine: SearchEngine) -> None:
    index = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(sample=8, exhaustive=0))
    for incident_id in index.ids[:5]:
        assert ranked(index, incident_id, 5)
    assert "_passages" not in index.__dict__  # the exact path's copy of every kept passage was never made
    kept = len(index._layout[0])
    vectors, _ = index._sample_vectors
    assert len(vectors) < kept and len(vectors) == len(index._segments(index._sample)[0])
    rows, incident_of = index._rows
    assert rows.dtype == np.int64 and incident_of.dtype == np.int64  # positions only
    exact = SimilarityIndex(engine)
    ranked(exact, exact.ids[0], 5)
    assert exact._passages[0].shape[0] == kept


def test_batch_search_and_row_fetch_agree_with_single_queries(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(1500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[[5, 77, 1200]] + 0.01
    ivf = IvfIndex.build(vectors)
    ivf.save(tmp_path)
    assert ivf._reader is not None  # rows are read from the file
    for index in (ExactIndex(vectors), HnswIndex.build(vectors), ivf, LayeredIndex(ExactIndex(vectors[:1000]), ExactIndex(vectors[1000:]))):
        scores, ids = index.search_batch(queries, 7)
        assert scores.shape == ids.shape == (3, 7)
        for query, row_scores, row_ids in zip(queries, scores, ids, strict=True):
            single_scores, single_ids = index.search(query, 7)
            assert row_ids.tolist() == single_ids.tolist() and np.allclose(row_scores, single_scores, atol=1e-5)
        asked = np.array([1499, 0, 1200, 1201, 1202, 1001, 7])  # a run of adjacent rows is one read
        assert np.array_equal(index.rows(asked), vectors[asked])
    assert ExactIndex(vectors[:3]).search_batch(queries, 7)[1].shape == (3, 3)


def test_code_search_finds_the_rows_exact_search_finds(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(2000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[[3, 900, 1999]] + 0.01
    ivf = IvfIndex.build(vectors)
    ivf.save(tmp_path)
    scores, ids = ivf.search_codes_batch(queries, 10, nprobe=ivf.lists)  # every list: only the 8-bit codes differ from exact
    assert scores.shape == ids.shape == (3, 10) and ids.dtype == np.int64
    for query, row_scores, row_ids in zip(queries, scores, ids, strict=True):
        exact = vectors @ query
        assert row_ids[0] == int(np.argmax(exact))
        assert np.allclose(row_scores, exact[row_ids], atol=0.05)  # codes move a score by ~1e-3 per dimension
        assert len(set(row_ids.tolist()) & set(np.argsort(-exact)[:10].tolist())) >= 8
    few_scores, few_ids = ivf.search_codes_batch(queries[:1], 2000, nprobe=1)  # one list cannot hold every row: padded
    assert (few_ids == -1).any() and np.isneginf(few_scores[few_ids == -1]).all()


def test_rows_read_from_the_file_come_back_in_the_order_asked(tmp_path: Path) -> None:
    vectors = np.random.default_rng(5).normal(size=(300, 8)).astype(np.float32)
    ivf = IvfIndex.build(vectors)
    ivf.save(tmp_path)
    assert ivf._reader is not None
    asked_lists = [
        np.array([10, 11, 12, 3, 4, 299]),  # runs out of file order
        np.array([9, 8, 7, 7, 7, 100]),  # descending rows and repeats: each its own read
        np.arange(300)[::-1],
        np.array([42]),
    ]
    for asked in asked_lists:
        got = ivf.rows(asked)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        assert np.array_equal(got, vectors[asked])
    assert ivf.rows(np.zeros(0, dtype=np.int64)).shape == (0, 8)
    with pytest.raises(IndexError, match="past the end"):
        ivf.rows(np.array([298, 299, 300]))
    with pytest.raises(IndexError, match="negative"):
        ivf.rows(np.array([5, -1]))


def test_the_code_search_threads_follow_openmps_variable_else_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0))
    for value, expected in (("3", 3), ("4,2", 4), (" 2 ", 2), ("0", cores), ("many", cores), ("", cores)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert ivf_module._search_threads() == expected, value
    monkeypatch.delenv("OMP_NUM_THREADS")
    with one_blas_thread():  # a caller's temporary limit is not taken for the machine's
        assert ivf_module._search_threads() == cores


def test_a_code_search_spreads_its_queries_over_threads_and_restores_the_callers_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    vectors = rng.normal(size=(3000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ivf = IvfIndex.build(vectors)
    queries = vectors[rng.choice(3000, 12, replace=False)] + 0.01
    monkeypatch.setattr(ivf_module, "SEARCH_THREADS", 3)
    with ivf_module.query_threads(2):
        assert faiss.omp_get_max_threads() == 2
    with ivf_module.query_threads(10):
        assert faiss.omp_get_max_threads() == 3
    with ivf_module.query_threads(0):
        assert faiss.omp_get_max_threads() == 1
    answers = {}
    for threads in (1, 3):
        monkeypatch.setattr(ivf_module, "SEARCH_THREADS", threads)
        with one_blas_thread():  # as the candidate path calls it: the caller's limit holds again afterwards
            limit = faiss.omp_get_max_threads()
            answers[threads] = ivf.search_codes_batch(queries, 20, nprobe=4)
            assert faiss.omp_get_max_threads() == limit
    assert np.array_equal(answers[1][1], answers[3][1]) and np.array_equal(answers[1][0], answers[3][0])


@pytest.mark.slow  # builds a library of its own (~2.5 s)
def test_the_candidate_path_over_an_inverted_file_keeps_the_exact_head(tmp_path: Path, data_dir: Path) -> None:
    ids = sorted(p.stem for p in (data_dir / "incidents").glob("*.yaml"))[:SIZE]
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=1, ivf_threshold=1)  # an inverted file at any size
    library = Library(load_library(small_library(tmp_path / "lib", data_dir, ids)), config, embedder=HashEmbedder())
    library.build_index()
    engine = library._search_service.engine
    assert engine.dense.index.kind == "ivf"
    exact = SimilarityIndex(engine)
    candidates = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(dense=8, lexical=8, graph=4, sample=16, exhaustive=0))
    top1, overlap = 0, 0.0
    for incident_id in exact.ids:
        truth = [e.incident_id for e in ranked(exact, incident_id, 5)]
        found = [e.incident_id for e in ranked(candidates, incident_id, 5)]
        top1 += truth[0] in found
        overlap += len(set(truth) & set(found)) / 5
    # pools of at most 20 of 47 candidates, the dense ones found by the codes over half the calibrated lists (8 of 10):
    # the exact best kept for 48 of 48 queries, 0.963 of the top 5 (the same with every list, 0.946 with a quarter)
    assert top1 >= 0.95 * SIZE
    assert overlap / SIZE >= 0.9


def test_the_pruned_lexical_pool_ranks_as_the_full_columns_do(engine: SearchEngine) -> None:
    """MaxScore skips the common terms' columns (incidentlib/search/lexical_top.py): with a sample of every incident
    the statistics are exact, and the pools and rankings are those of the full columns."""
    pools = {"dense": 8, "lexical": 8, "graph": 4, "sample": SIZE, "exhaustive": 0}
    full = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(**pools, prune_lexical=False))
    pruned = SimilarityIndex(engine, candidate_threshold=0, pools=Pools(**pools))
    skipped = 0
    for incident_id in full.ids:
        same(ranked(pruned, incident_id, 10), ranked(full, incident_id, 10))
        query = pruned.incident_query(pruned.data.incidents[incident_id])
        mask = np.ones(len(pruned.ids), dtype=bool)
        mask[pruned.position[incident_id]] = False
        top = lexical_top(pruned._weighted_query(query.terms), pruned._artefact.matrix, pruned._lexical_columns,
                          pruned._term_bounds, mask, pruned.position[incident_id], np.zeros(0, dtype=np.int64),
                          pruned._sample, 8, 2000)
        skipped += top.pruned_terms
    assert skipped > 0  # the comparison covered queries whose common terms were skipped
