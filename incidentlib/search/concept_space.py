"""Incidents as weighted concept vectors, for the graph and cause evidence of ``similar``.

``g_x[k] = conf_x(k) · ln(1 + N / df(k))`` over the concepts ``k`` of the space (``conf`` is 1 for a curated link,
the confidence of an inferred one; ``df`` counts the incidents holding ``k``, ``N`` every incident), normalised, so
the evidence between a query ``q`` and an incident ``c`` is the cosine ``cos(g_q, g_c)``.  A space may keep some
concepts only (the causes): the weights and ``df`` are the same, the vector and its norm hold those concepts alone.

**Broader concepts.**  Given the vocabulary's ``broader`` chains, an incident also holds every concept broader than
one of its own, with the highest confidence among its concepts under it: ``conf_x(a) = max_{k ⊑ a} conf_x(k)``.  A
driver bug is a software bug, so two incidents with a driver bug and a firmware bug share ``software-bug``.  No
weight is chosen for that: ``df(a)`` counts the incidents holding ``a`` or anything under it, so a broad concept
weighs ``ln(1 + N/df(a))`` — what sharing it tells on this collection, always less than sharing the narrower
concept — the information content of the most informative common ancestor that Resnik's measure of similarity
in a taxonomy reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import sparse  # type: ignore[import-untyped]

#: The concepts broader than a concept, nearest first (:meth:`incidentlib.vocab.Vocabulary.ancestors`).
Broader = Callable[[str], Sequence[str]]


def with_broader(concepts: Mapping[str, float], broader: Broader | None) -> Mapping[str, float]:
    """``concepts`` and every concept broader than one of them, each broader one with the highest weight of the
    concepts under it (the module docstring); ``concepts`` itself when ``broader`` is ``None``."""
    if broader is None:
        return concepts
    closed = dict(concepts)
    for concept, weight in concepts.items():
        for ancestor in broader(concept):
            if closed.get(ancestor, 0.0) < weight:
                closed[ancestor] = weight
    return closed


@dataclass(frozen=True)
class ClosedConcepts:
    """Every incident's concept weights closed over the broader concepts, as an (incidents × concepts) matrix whose
    columns are in the order the concepts are first met; one pass over the records, however many spaces use it."""

    index: dict[str, int]
    matrix: sparse.csr_matrix
    broader: Broader | None = field(default=None, compare=False)

    @classmethod
    def of(cls, weighted: Sequence[Mapping[str, float]], broader: Broader | None = None) -> ClosedConcepts:
        index: dict[str, int] = {}
        columns: list[int] = []
        values: list[float] = []
        ends = np.zeros(len(weighted) + 1, dtype=np.int64)
        for row, concepts in enumerate(weighted):
            for concept, weight in with_broader(concepts, broader).items():
                columns.append(index.setdefault(concept, len(index)))
                values.append(weight)
            ends[row + 1] = len(columns)
        matrix = sparse.csr_matrix((np.asarray(values, dtype=np.float64), np.asarray(columns, dtype=np.int64), ends),
                                   shape=(len(weighted), len(index)))
        return cls(index, matrix, broader)


@dataclass(frozen=True)
class ConceptSpace:
    """Concept columns, their ``ln(1 + N/df)`` and the (incidents × concepts) matrix of unit rows (zero rows stay 0);
    ``broader``, when given, closes every vector (the incidents' and the queries') over the broader concepts."""

    index: dict[str, int]
    idf: np.ndarray
    matrix: sparse.csr_matrix
    broader: Broader | None = field(default=None, compare=False)

    @classmethod
    def of(cls, weighted: Sequence[Mapping[str, float]], keep: Callable[[str], bool] | None = None,
           broader: Broader | None = None) -> ConceptSpace:
        """The space of ``weighted`` (each incident's concept weights), holding the concepts ``keep`` accepts (all
        when ``None``), each incident closed over the concepts ``broader`` gives (not when ``None``)."""
        return cls.of_closed(ClosedConcepts.of(weighted, broader), keep)

    @classmethod
    def of_closed(cls, closed: ClosedConcepts, keep: Callable[[str], bool] | None = None) -> ConceptSpace:
        """The space over ``closed`` holding the concepts ``keep`` accepts: several spaces over one collection
        (the graph's and the causes') share its one pass over the records."""
        kept = [(concept, column) for concept, column in closed.index.items() if keep is None or keep(concept)]
        index = {concept: position for position, (concept, _) in enumerate(kept)}  # first seen first, as in ``closed``
        kept_columns = [column for _, column in kept]
        held = sparse.csc_matrix(closed.matrix[:, np.asarray(kept_columns, dtype=np.int64)]) if kept else \
            sparse.csc_matrix((closed.matrix.shape[0], 0))
        n = max(closed.matrix.shape[0], 1)
        df = np.diff(held.indptr).astype(np.float64)  # every stored entry is a holding incident
        idf = np.log(1 + n / np.maximum(df, 1))
        matrix = sparse.csr_matrix(held @ sparse.diags(idf))
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return cls(index, idf, sparse.csr_matrix(sparse.diags(1 / norms) @ matrix), closed.broader)

    def query(self, concepts: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray] | None:
        """The query's unit vector as (columns, weights), or ``None`` when it holds no concept of the space."""
        closed = with_broader(concepts, self.broader)
        known = [(self.index[c], w * self.idf[self.index[c]]) for c, w in closed.items() if c in self.index]
        weights = np.array([w for _, w in known], dtype=np.float64)
        norm = float(np.linalg.norm(weights)) if known else 0.0
        if norm == 0:
            return None
        return np.array([c for c, _ in known], dtype=np.int64), weights / norm

    def scores(self, concepts: Mapping[str, float]) -> np.ndarray | None:
        """``cos(g_q, g_c)`` for every incident (``None``: the query holds no concept of the space)."""
        vector = self.query(concepts)
        if vector is None:
            return None
        dense = np.zeros(self.matrix.shape[1])
        dense[vector[0]] = vector[1]
        return np.asarray(self.matrix @ dense).ravel()

    @cached_property
    def columns(self) -> sparse.csc_matrix:
        """The matrix column-major: a query reads its concepts' columns only (the candidate path)."""
        return sparse.csc_matrix(self.matrix)

    def column(self, concepts: Mapping[str, float]) -> np.ndarray | None:
        """:meth:`scores` from the query concepts' columns only."""
        vector = self.query(concepts)
        if vector is None:
            return None
        return np.asarray(self.columns[:, vector[0]] @ vector[1]).ravel()
