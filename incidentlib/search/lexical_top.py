"""The lexical evidence of the candidate path without reading every query term's whole column.

``L(q, c) = Σ_t w_q(t) · B[c, t]`` (:mod:`.similarity`) is needed for two things on the candidate path:
the :data:`~.similarity.LEXICAL_POOL` incidents with the largest ``L``, and the mean and deviation of ``L``
over every candidate incident (the z-score).  Summing the query terms' columns gives both exactly, but a
record used as a query has hundreds of terms and the common ones have columns as long as the library:
at 100k incidents that read millions of entries a query (about 14 ms of a 40 ms request).

**The pool, by MaxScore** (Turtle and Flood's term-at-a-time pruning).  Each term's contribution to any
incident is at most ``u_t = w_q(t) · max_c B[c, t]``.  Let ``θ`` be a lower bound of the pool's last
score (the ``size``-th largest exact ``L`` among *seed* incidents, scored by their rows).  Sort the terms
by ``u_t``; the longest run of the smallest bounds whose sum ``U`` stays below ``θ`` are *non-essential*:
an incident that has none of the other (*essential*) terms scores at most ``U < θ``, so it cannot be in
the pool.  Only the essential terms' columns are read (``E(c)``, their partial sum); the incidents with
``E(c) + U ≥ θ`` are scored exactly by their rows, and the pool is their best ``size``.  Common terms,
with small idf and long columns, are the ones skipped.  The pool is exact (the same incidents as the
full columns give) unless more than ``rescore`` incidents pass the bound; then the ``rescore`` with the
largest ``E`` are the ones scored.

**The statistics, stratified.**  The mean is exact without any column: ``Σ_c L(q, c) = Σ_t w_q(t) · s_t``
with ``s_t = Σ_c B[c, t]`` saved per term.  For the second moment the candidates are split in two:
the incidents scored exactly (``K``: the ones that passed the bound, where the large scores are) count
exactly; for the rest ``R`` the mean is known exactly (the total minus ``K``'s), and only its spread is
estimated on a fixed sample ``S`` of incidents: ``Σ_R L² ≈ |R| · (μ_R² + var_{S ∩ R} L)``.  So the
heavy tail of the lexical scores, which a plain sample would estimate worst, is never sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse  # type: ignore[import-untyped]

from ..cold_pages import announce_cold_columns, announce_cold_rows

#: Relative slack on the MaxScore bound: ``E`` (column order) and the exact row scores sum the same products in a
#: different order, so equal scores can differ by a few ulps; the slack keeps such an incident in.
BOUND_SLACK = 1e-9
#: Column entries read, highest-bound terms first, to find seed incidents of their own (:func:`lexical_top`): the
#: rare, specific terms that decide the head have short columns, so this covers several of them for ~0.1 ms.
SEED_COLUMN_ENTRIES = 20_000


@dataclass(frozen=True)
class TermBounds:
    """Per term ``t`` of the BM25 matrix: ``max_c B[c, t]`` (the bound of MaxScore) and ``Σ_c B[c, t]`` (the exact mean)."""

    maxima: np.ndarray
    sums: np.ndarray

    @classmethod
    def of(cls, columns: sparse.csc_matrix) -> TermBounds:
        indptr, data = columns.indptr, columns.data
        filled = np.flatnonzero(np.diff(indptr) > 0)
        maxima = np.zeros(columns.shape[1])
        sums = np.zeros(columns.shape[1])
        if len(filled):
            maxima[filled] = np.maximum.reduceat(data, indptr[filled])
            sums[filled] = np.add.reduceat(data.astype(np.float64, copy=False), indptr[filled])
        return cls(maxima=maxima, sums=sums)


@dataclass(frozen=True)
class LexicalTop:
    """What the candidate path needs of ``L(q, ·)``: the pool, and the mean and deviation over the candidates."""

    pool: np.ndarray  # positions, best first is not promised
    known: np.ndarray  # positions scored exactly (ascending): the pool, the seeds and those that passed the bound
    known_scores: np.ndarray  # their L(q, c)
    mean: float
    std: float
    pruned_terms: int  # query terms whose columns were not read
    rescored: int  # incidents scored exactly by their rows


class WeightedQuery:
    """``w_q`` as columns and weights, and scoring of chosen incidents by their rows of ``B``."""

    def __init__(self, terms: dict[int, float], vocabulary_size: int) -> None:
        self.columns = np.fromiter(terms.keys(), dtype=np.int64, count=len(terms))
        self.weights = np.fromiter(terms.values(), dtype=np.float64, count=len(terms))
        # np.zeros maps zero pages lazily: only the query terms' pages are written.
        self.vector = np.zeros(vocabulary_size)
        self.vector[self.columns] = self.weights

    def score_rows(self, rows: sparse.csr_matrix, positions: np.ndarray) -> np.ndarray:
        """``L(q, c)`` for the incidents at ``positions``, exactly, from their rows.  Many rows of a mapped matrix that
        are out of the page cache are asked for together first (:func:`~incidentlib.cold_pages.announce_cold_rows`)."""
        if not len(positions):
            return np.zeros(0)
        announce_cold_rows(rows, positions)
        return np.asarray(rows[positions] @ self.vector).ravel()

    def score_columns(self, columns: sparse.csc_matrix, which: np.ndarray | None = None) -> np.ndarray:
        """``Σ_t w_q(t) · B[:, t]`` over the query terms (or the subset ``which`` of them), for every incident; the
        columns of a mapped matrix are asked for at once when one is cold (:func:`~incidentlib.cold_pages.announce_cold_columns`)."""
        picked = self.columns if which is None else self.columns[which]
        weights = self.weights if which is None else self.weights[which]
        if not len(picked):
            return np.zeros(columns.shape[0])
        announce_cold_columns(columns, picked)
        return np.asarray(columns[:, picked] @ weights).ravel()


def lexical_top(query: WeightedQuery, rows: sparse.csr_matrix, columns: sparse.csc_matrix, bounds: TermBounds,
                mask: np.ndarray, exclude: int | None, seeds: np.ndarray, sample: np.ndarray, size: int,
                rescore: int) -> LexicalTop:
    """The ``size`` allowed incidents with the largest positive ``L`` and the mean and deviation of ``L`` over the
    allowed incidents (``mask``: every incident but ``exclude``), by the module's pruning and stratification.

    ``seeds`` are incidents likely to score high (the other pools'), scored exactly to set ``θ``; ``sample`` is the
    fixed sample that estimates the spread of the scores not computed.  ``rescore`` caps the incidents scored by
    their rows."""
    n = int(mask.sum())
    term_bounds = query.weights * bounds.maxima[query.columns]
    order = np.argsort(term_bounds, kind="stable")
    # The best incidents by the highest-bound terms alone join the seeds, so θ is not left to the other pools.
    lengths = np.diff(columns.indptr)[query.columns[order[::-1]]]
    head_terms = max(1, int(np.searchsorted(np.cumsum(lengths), SEED_COLUMN_ENTRIES, side="right")))
    head = query.score_columns(columns, order[::-1][:head_terms])
    seeds = np.concatenate([seeds.astype(np.int64), _best_positive(head, np.flatnonzero(mask), size)])
    seeds = np.unique(seeds[mask[seeds]])
    seed_scores = query.score_rows(rows, seeds)
    positive = np.sort(seed_scores[seed_scores > 0])[::-1]
    theta = float(positive[size - 1]) if size > 0 and len(positive) >= size else 0.0
    running = np.cumsum(term_bounds[order])
    skipped = int(np.searchsorted(running, theta, side="left"))  # the smallest bounds summing below θ
    if skipped == 0:  # nothing to skip: the full columns, exact statistics
        scores = query.score_columns(columns)
        scores[~mask] = 0.0
        allowed = np.flatnonzero(mask)
        return LexicalTop(pool=_best_positive(scores, allowed, size), known=allowed, known_scores=scores[allowed],
                          mean=_masked_mean(scores, mask, n), std=_masked_std(scores, mask, n), pruned_terms=0,
                          rescored=len(seeds))
    left_out = float(running[skipped - 1])
    partial = query.score_columns(columns, order[skipped:])
    passing = np.flatnonzero(mask & (partial >= theta - left_out - BOUND_SLACK * max(theta, 1.0)))
    if len(passing) > rescore:
        passing = passing[np.argpartition(-partial[passing], rescore - 1)[:rescore]]
    known = np.union1d(passing, seeds)
    # the seeds were scored above: only the rows that passed the bound are read now
    known_scores = np.empty(len(known))
    from_seeds = np.isin(known, seeds, assume_unique=True)
    known_scores[from_seeds] = seed_scores[np.searchsorted(seeds, known[from_seeds])]
    known_scores[~from_seeds] = query.score_rows(rows, known[~from_seeds])
    pool = known[_best_positive(known_scores, np.arange(len(known)), size)]

    total = float(query.weights @ bounds.sums[query.columns])
    if exclude is not None:
        total -= float(query.score_rows(rows, np.array([exclude]))[0])
    mean = total / n if n else 0.0
    rest = n - len(known)
    squares = float(known_scores @ known_scores)
    if rest > 0:
        rest_mean = (total - float(known_scores.sum())) / rest
        in_rest = sample[mask[sample]]
        in_rest = in_rest[~np.isin(in_rest, known, assume_unique=True)]
        spread = query.score_rows(rows, in_rest)
        if len(spread) == rest:  # the sample holds every remaining incident: exact
            squares += float(spread @ spread)
        else:
            rest_variance = float(spread.var(ddof=1)) if len(spread) > 1 else 0.0
            squares += rest * (rest_mean * rest_mean + rest_variance)
    variance = squares / n - mean * mean if n else 0.0
    return LexicalTop(pool=pool, known=known, known_scores=known_scores, mean=mean, std=float(np.sqrt(max(variance, 0.0))),
                      pruned_terms=skipped, rescored=len(known))


def scores_of(top: LexicalTop, positions: np.ndarray) -> np.ndarray | None:
    """``L`` of ``positions`` from what :func:`lexical_top` scored, or None when one of them was not scored."""
    found = np.minimum(np.searchsorted(top.known, positions), max(len(top.known) - 1, 0))
    if not len(top.known) or not np.array_equal(top.known[found], positions):
        return None
    result: np.ndarray = top.known_scores[found]
    return result


def _best_positive(values: np.ndarray, candidates: np.ndarray, size: int) -> np.ndarray:
    """Up to ``size`` of ``candidates`` with the largest positive ``values`` (any order)."""
    hits: np.ndarray = candidates[values[candidates] > 0]
    if size <= 0:
        return hits[:0]
    if len(hits) > size:
        hits = hits[np.argpartition(-values[hits], size - 1)[:size]]
    return hits


def _masked_mean(values: np.ndarray, mask: np.ndarray, n: int) -> float:
    return float(values[mask].sum()) / n if n else 0.0


def _masked_std(values: np.ndarray, mask: np.ndarray, n: int) -> float:
    if not n:
        return 0.0
    chosen = values[mask]
    return float(chosen.std())
