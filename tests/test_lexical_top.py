"""The candidate path's lexical pool by MaxScore and its stratified statistics, against the full columns."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse  # type: ignore[import-untyped]

from incidentlib.search.lexical_top import TermBounds, WeightedQuery, lexical_top

INCIDENTS, TERMS = 4000, 5000


def bm25_like(seed: int = 1) -> sparse.csr_matrix:
    """Zipf-distributed term frequencies (a few terms in most incidents, most terms in few), idf-weighted."""
    rng = np.random.default_rng(seed)
    df = np.maximum(1, (INCIDENTS * 0.8 / np.arange(1, TERMS + 1) ** 0.7).astype(int))  # ~30 terms an incident
    rows = np.concatenate([rng.choice(INCIDENTS, d, replace=False) for d in df])
    cols = np.repeat(np.arange(TERMS), df)
    idf = np.log(1 + INCIDENTS / df)
    values = idf[cols] * rng.uniform(0.5, 2.2, size=len(cols))
    return sparse.csr_matrix((values, (rows, cols)), shape=(INCIDENTS, TERMS))


@pytest.fixture(scope="module")
def matrix() -> tuple[sparse.csr_matrix, sparse.csc_matrix, TermBounds]:
    rows = bm25_like()
    columns = sparse.csc_matrix(rows)
    return rows, columns, TermBounds.of(columns)


def incident_query(rows: sparse.csr_matrix, position: int) -> dict[int, float]:
    """An incident's own row as the query, L2-normalised (as a library record is used by ``similar``)."""
    start, end = rows.indptr[position], rows.indptr[position + 1]
    weights = rows.data[start:end] / np.linalg.norm(rows.data[start:end])
    return dict(zip(rows.indices[start:end].tolist(), weights.tolist(), strict=True))


def top_set(values: np.ndarray, mask: np.ndarray, size: int) -> set[int]:
    allowed = np.flatnonzero(mask & (values > 0))
    return set(allowed[np.argsort(-values[allowed], kind="stable")[:size]].tolist())


def test_term_bounds_are_the_column_maxima_and_sums(matrix) -> None:  # type: ignore[no-untyped-def]
    rows, _, bounds = matrix
    dense = rows.toarray()
    assert np.allclose(bounds.maxima, dense.max(axis=0)) and np.allclose(bounds.sums, dense.sum(axis=0))
    empty = sparse.csc_matrix((np.array([2.0]), (np.array([1]), np.array([2]))), shape=(3, 4))
    assert TermBounds.of(empty).maxima.tolist() == [0.0, 0.0, 2.0, 0.0]  # empty columns give 0, not a neighbour's value


@pytest.mark.parametrize("position", [3, 250, 1999])
def test_the_pool_and_the_mean_are_exact_and_common_terms_are_skipped(matrix, position: int) -> None:  # type: ignore[no-untyped-def]
    rows, columns, bounds = matrix
    query = WeightedQuery(incident_query(rows, position), TERMS)
    full = query.score_columns(columns)
    mask = np.ones(INCIDENTS, dtype=bool)
    mask[position] = False
    rng = np.random.default_rng(0)
    seeds = rng.choice(INCIDENTS, 300, replace=False)  # the other pools: not the best incidents, a random spread
    sample = np.sort(rng.choice(INCIDENTS, 500, replace=False))
    found = lexical_top(query, rows, columns, bounds, mask, position, seeds, sample, size=50, rescore=INCIDENTS)
    assert found.pruned_terms > 0 and found.rescored < INCIDENTS // 2  # it skipped columns and scored few rows
    assert set(found.pool.tolist()) == top_set(full, mask, 50)
    assert found.mean == pytest.approx(full[mask].mean(), rel=1e-9)
    # the deviation is estimated on 500 of ~4,000 incidents, but only where the scores are small
    assert found.std == pytest.approx(full[mask].std(), rel=0.05)
    assert np.allclose(query.score_rows(rows, found.pool), full[found.pool])


def test_a_sample_of_every_incident_gives_the_exact_deviation(matrix) -> None:  # type: ignore[no-untyped-def]
    rows, columns, bounds = matrix
    query = WeightedQuery(incident_query(rows, 77), TERMS)
    full = query.score_columns(columns)
    mask = np.ones(INCIDENTS, dtype=bool)
    mask[77] = False
    found = lexical_top(query, rows, columns, bounds, mask, 77, np.arange(0, INCIDENTS, 13), np.arange(INCIDENTS),
                        size=50, rescore=INCIDENTS)
    assert found.pruned_terms > 0
    assert (found.mean, found.std) == (pytest.approx(full[mask].mean(), rel=1e-9), pytest.approx(full[mask].std(), rel=1e-9))


def test_without_a_bound_nothing_is_skipped(matrix) -> None:  # type: ignore[no-untyped-def]
    rows, columns, bounds = matrix
    query = WeightedQuery(incident_query(rows, 5), TERMS)
    full = query.score_columns(columns)
    mask = np.ones(INCIDENTS, dtype=bool)
    # a pool as large as the library: fewer seeds than that, so θ = 0, every column read, exact statistics
    found = lexical_top(query, rows, columns, bounds, mask, None, np.array([], dtype=np.int64), np.arange(10), INCIDENTS, 100)
    assert found.pruned_terms == 0
    assert set(found.pool.tolist()) == top_set(full, mask, INCIDENTS)
    assert (found.mean, found.std) == (pytest.approx(full.mean(), rel=1e-12), pytest.approx(full.std(), rel=1e-12))


def test_a_small_rescore_cap_keeps_the_pool_bounded_and_allowed(matrix) -> None:  # type: ignore[no-untyped-def]
    rows, columns, bounds = matrix
    query = WeightedQuery(incident_query(rows, 9), TERMS)
    full = query.score_columns(columns)
    mask = np.ones(INCIDENTS, dtype=bool)
    mask[::2] = False  # half the incidents not allowed
    seeds = np.arange(1, INCIDENTS, 7)
    found = lexical_top(query, rows, columns, bounds, mask, None, seeds, np.arange(0, INCIDENTS, 9), size=50, rescore=60)
    assert len(found.pool) == 50 and mask[found.pool].all()
    assert found.rescored <= 60 + len(np.unique(seeds[mask[seeds]])) + 50  # capped, besides the seeds (given and own)
    # capped by the partial sums of the essential terms: most of the exact head is still found
    assert len(set(found.pool.tolist()) & top_set(full, mask, 50)) >= 40
