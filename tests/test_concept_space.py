"""Concept vectors of the graph and cause evidence: the cosine of the formula, a space of some concepts only, the
vectors closed over the broader concepts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from incidentlib.search.concept_space import ConceptSpace, with_broader

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


# software-bug ⊐ driver-bug, firmware-bug; hardware-fault ⊐ cable; nothing is broader than bgp
BROADER = {"driver-bug": ["software-bug"], "firmware-bug": ["software-bug"], "cable": ["hardware-fault"]}
TAXONOMY_INCIDENTS = [
    {"driver-bug": 1.0},
    {"firmware-bug": 0.7},
    {"software-bug": 1.0},
    {"cable": 1.0},
    {"bgp": 1.0},
    {"driver-bug": 0.6, "cable": 0.9},
]


def _closed(concepts: dict[str, float]) -> dict[str, float]:
    out = dict(concepts)
    for concept, weight in concepts.items():
        for ancestor in BROADER.get(concept, []):
            out[ancestor] = max(out.get(ancestor, 0.0), weight)
    return out


def test_broader_concepts_take_the_highest_weight_under_them() -> None:
    assert with_broader({"driver-bug": 0.6, "firmware-bug": 0.9, "bgp": 1.0}, lambda c: BROADER.get(c, [])) == {
        "driver-bug": 0.6, "firmware-bug": 0.9, "software-bug": 0.9, "bgp": 1.0}
    assert with_broader({"software-bug": 1.0, "driver-bug": 0.5}, lambda c: BROADER.get(c, []))["software-bug"] == 1.0
    unchanged = {"driver-bug": 1.0}
    assert with_broader(unchanged, None) is unchanged


def test_siblings_share_their_broader_concept_weighted_by_its_own_frequency() -> None:
    """A driver bug and a firmware bug meet at software-bug, whose df counts every incident under it (4 of 6), so it
    weighs less than a shared narrow concept; the cosine is the formula's over the closed vectors."""
    space = ConceptSpace.of(TAXONOMY_INCIDENTS, broader=lambda c: BROADER.get(c, []))
    flat = ConceptSpace.of(TAXONOMY_INCIDENTS)
    n = len(TAXONOMY_INCIDENTS)
    assert space.idf[space.index["software-bug"]] == pytest.approx(math.log(1 + n / 4))
    assert space.idf[space.index["driver-bug"]] == pytest.approx(math.log(1 + n / 2))
    query = {"firmware-bug": 1.0}
    scores, flat_scores = space.scores(query), flat.scores(query)
    assert scores is not None and flat_scores is not None
    df = {c: sum(1 for i in TAXONOMY_INCIDENTS if c in _closed(i)) for i in TAXONOMY_INCIDENTS for c in _closed(i)}

    def vector(concepts: dict[str, float]) -> dict[str, float]:
        return {c: w * math.log(1 + n / df[c]) for c, w in _closed(concepts).items()}

    assert scores == pytest.approx([_cosine(vector(query), vector(i)) for i in TAXONOMY_INCIDENTS], abs=1e-12)
    assert flat_scores[0] == 0.0 < scores[0]  # the sibling: nothing shared until the broader concept counts
    assert scores[0] < scores[1]  # sharing the concept itself says more than sharing its broader one
    assert scores[3] == scores[4] == 0.0  # other branches and unrelated concepts: still nothing shared
    assert np.allclose(space.column(query), scores)  # the candidate path closes the query the same way
