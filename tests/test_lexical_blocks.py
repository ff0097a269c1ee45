"""BM25 scores summed a block of chunks at a time (``LexicalIndex.run_scores``): the same float32 scores, and the
same per-run maxima, as one query term at a time over every chunk followed by ``np.maximum.reduceat``; with a depth,
the same ``depth`` best runs."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
from fakes import HashEmbedder

import incidentlib.search.lexical as lexical
from incidentlib.search.engine import SearchConfig, SearchEngine
from incidentlib.search.lexical import LexicalIndex, postings_from_tokens

WORDS = ["gpu", "xid", "79", "nccl", "timeout", "장애", "rank", "link", "down", "retry", "fabric", "ecc"]


def random_index(chunks: int, seed: int) -> LexicalIndex:
    rng = random.Random(seed)
    tokens = [[rng.choice(WORDS) for _ in range(rng.randint(0, 9))] for _ in range(chunks)]
    return LexicalIndex(postings=postings_from_tokens(iter(tokens), len(tokens)))


def term_at_a_time(index: LexicalIndex, query: str) -> np.ndarray:
    """The reference: every posting of one query term added over the whole score array, term after term."""
    p = index.postings
    scores = np.zeros(p.size, dtype=np.float32)
    for term in index._token_ids(query):
        np.add.at(scores, p.indices[p.indptr[term]:p.indptr[term + 1]], p.data[p.indptr[term]:p.indptr[term + 1]])
    return scores


def random_runs(rng: np.random.Generator, size: int, first: int) -> np.ndarray:
    """Run starts from ``first``: mostly short runs, some longer than a block."""
    lengths = np.where(rng.random(size) < 0.05, rng.integers(20, 60, size), rng.integers(1, 6, size))
    starts = first + np.concatenate([[0], np.cumsum(lengths)])
    return starts[starts < size].astype(np.int64)


QUERIES = ["gpu xid 79", "nccl timeout timeout rank", "장애 link down retry fabric ecc gpu", "unknown words only", ""]


@pytest.mark.parametrize("block", [1, 3, 16, 1 << 19])
@pytest.mark.parametrize("first", [0, 4])
def test_run_scores_equal_term_at_a_time_bit_for_bit(monkeypatch: pytest.MonkeyPatch, block: int, first: int) -> None:
    monkeypatch.setattr(lexical, "SCORE_BLOCK_CHUNKS", block)
    index = random_index(500, seed=block + first)
    runs = random_runs(np.random.default_rng(block), 500, first)
    assert (np.diff(runs) > block).any() or block > 60  # some run spans several blocks when blocks are small
    for query in QUERIES:
        want = term_at_a_time(index, query)
        scores, best = index.run_scores(query, runs)
        assert scores.dtype == np.float32 and np.array_equal(scores, want), query
        assert best is not None and np.array_equal(best, np.maximum.reduceat(want, runs)), query
        alone, none = index.run_scores(query, None)
        assert none is None and np.array_equal(alone, want) and np.array_equal(index.scores(query), want)
    assert term_at_a_time(index, "gpu gpu").max() > term_at_a_time(index, "gpu").max()  # repeats count twice


def top_runs(best: np.ndarray, depth: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
    """The ``depth`` allowed runs with the largest positive best scores, ties to the earlier run."""
    keep = (best > 0) & (True if allowed is None else allowed)
    runs = np.flatnonzero(keep)
    ranked = runs[np.lexsort((runs, -best[runs]))][:depth]
    return [(int(r), float(best[r])) for r in ranked]


@pytest.mark.parametrize("block", [3, 16, 40])
@pytest.mark.parametrize("first", [0, 4])
def test_with_a_depth_the_best_runs_are_exact(monkeypatch: pytest.MonkeyPatch, block: int, first: int) -> None:
    """Runs that cannot rank among the ``depth`` best may be left at 0, but the ``depth`` best (among the allowed
    ones) are those of the full reduction, with their exact scores; ties (few distinct weights) go to the earlier
    run; chunks before the first run belong to none."""
    monkeypatch.setattr(lexical, "SCORE_BLOCK_CHUNKS", block)
    index = random_index(1500, seed=block)
    rng = np.random.default_rng(block)
    runs = random_runs(rng, 1500, first)
    allowed_sets = [None, rng.random(len(runs)) < 0.3]
    skipped = 0
    for query in QUERIES:
        want = np.maximum.reduceat(term_at_a_time(index, query), runs)
        for depth in (1, 5, 50, 10_000):
            for allowed in allowed_sets:
                scores, best = index.run_scores(query, runs, depth, allowed)
                assert best is not None and np.array_equal(scores, term_at_a_time(index, query))
                assert top_runs(best, depth, allowed) == top_runs(want, depth, allowed), (query, depth)
                assert np.all((best == want) | (best == 0))
                skipped += int(np.sum(best != want))
    assert skipped > 0  # the cut did leave runs unreduced


def test_an_empty_index_scores_nothing() -> None:
    index = LexicalIndex(postings=postings_from_tokens(iter([]), 0))
    scores, best = index.run_scores("gpu", np.zeros(0, dtype=np.int64))
    assert len(scores) == 0 and best is not None and len(best) == 0


def test_the_engine_ranks_blocked_scores_as_the_per_chunk_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lexical leg with the per-incident maxima taken block by block gives the ranking (incident, score, best
    chunk) that the whole score array reduced at once gives."""
    monkeypatch.setattr(lexical, "SCORE_BLOCK_CHUNKS", 7)
    rng = np.random.default_rng(8)
    incidents = 120
    chunk_incident = np.sort(rng.integers(0, incidents, 900)).astype(np.int64)
    ids = [f"I{i}" for i in range(incidents)]
    engine = SearchEngine(SimpleNamespace(incidents=dict.fromkeys(ids)), SearchConfig(), HashEmbedder())  # type: ignore[arg-type]
    engine.__dict__.update(_chunk_incident=chunk_incident, _incident_ids=ids, lexical=random_index(900, seed=8))
    assert engine._incident_chunks[2]  # grouped: the blocked path
    allowed = {ids[i] for i in range(0, incidents, 3)}
    for query in QUERIES[:3]:
        for depth in (None, 1, 10, 50):
            for chosen in (None, allowed):
                reference = engine._top_incidents(term_at_a_time(engine.lexical, query), depth, chosen, positive=True)
                got = engine.local_rank_lexical(query, chosen, depth)
                assert got == reference and got, (query, depth)


def test_chunks_before_the_first_run_count_for_no_run_with_a_depth() -> None:
    """A rare term in a chunk before the first run and in one run: with few hits among many runs, the cut path looks
    hits up in their runs, and the leading chunk must not be taken for the last run."""
    tokens = [["rare", "rare", "rare"], ["x"], *[["x"]] * 10, ["x", "rare"], *[["x"]] * 10]
    index = LexicalIndex(postings=postings_from_tokens(iter(tokens), len(tokens)))
    runs = np.arange(2, len(tokens), dtype=np.int64)
    scores, _ = index.run_scores("rare", runs)
    want = np.maximum.reduceat(scores, runs)
    _, cut = index.run_scores("rare", runs, depth=5)
    assert cut is not None and np.array_equal(cut, want) and top_runs(cut, 5, None) == [(10, float(want[10]))]
