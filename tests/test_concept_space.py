"""Concept vectors of the graph and cause evidence: the cosine of the formula, a space of some concepts only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from incidentlib.search.concept_space import ConceptSpace

INCIDENTS = [
    {"nccl": 1.0, "cause-timeout": 1.0, "hang": 0.5},
    {"nccl": 0.8, "cause-driver": 1.0},
    {"cause-timeout": 0.6, "hang": 1.0},
    {"bgp": 1.0},
    {},
]


def _vector(concepts: dict[str, float], keep: set[str] | None) -> dict[str, float]:
    """``g[k] = conf(k) · ln(1 + N/df(k))`` over the kept concepts, by hand."""
    df = {c: sum(1 for i in INCIDENTS if c in i) for c in {c for i in INCIDENTS for c in i}}
    return {c: w * math.log(1 + len(INCIDENTS) / df[c]) for c, w in concepts.items() if c in df and (keep is None or c in keep)}


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return sum(a[c] * b.get(c, 0.0) for c in a) / norm if norm else 0.0


@pytest.mark.parametrize("keep", [None, {"cause-timeout", "cause-driver"}])
def test_scores_are_the_cosine_of_the_weighted_vectors(keep) -> None:
    space = ConceptSpace.of(INCIDENTS, keep=None if keep is None else keep.__contains__)
    query = {"nccl": 1.0, "cause-timeout": 0.9, "unknown": 1.0}
    scores = space.scores(query)
    assert scores is not None
    expected = [_cosine(_vector(query, keep), _vector(incident, keep)) for incident in INCIDENTS]
    assert scores == pytest.approx(expected, abs=1e-12)
    assert np.allclose(space.column(query), scores)  # the candidate path's column-wise product: the same values


def test_a_query_without_a_concept_of_the_space_has_no_scores() -> None:
    causes = ConceptSpace.of(INCIDENTS, keep=lambda c: c.startswith("cause-"))
    assert causes.scores({"nccl": 1.0, "hang": 1.0}) is None
    assert causes.column({"nccl": 1.0}) is None
    assert causes.scores({}) is None
    # an incident holding none of the space's concepts scores 0, never NaN
    scores = causes.scores({"cause-driver": 1.0})
    assert scores is not None and scores.tolist() == pytest.approx([0.0, 1.0, 0.0, 0.0, 0.0])
