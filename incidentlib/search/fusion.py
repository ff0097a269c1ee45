"""Combine a lexical and a dense ranking of incidents.

- ``rrf``: reciprocal-rank fusion, ``score = Σ 1 / (60 + rank)`` over the lists an
  incident appears in (ranks start at 1).
- ``weighted``: each list's scores are min-max normalised to [0, 1] over its
  candidates, then ``score = α·dense + (1 − α)·lexical`` (missing = 0).

``incidentlib eval`` compares the two; the better one is the default.
"""

from __future__ import annotations

from enum import Enum

RRF_K = 60
DEFAULT_ALPHA = 0.6


class FusionMethod(str, Enum):
    rrf = "rrf"
    weighted = "weighted"


def rrf(rankings: list[list[tuple[str, float]]], k: int = RRF_K) -> dict[str, float]:
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, (key, _) in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (k + rank)
    return fused


def _min_max(ranking: list[tuple[str, float]]) -> dict[str, float]:
    if not ranking:
        return {}
    values = [score for _, score in ranking]
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return {key: 1.0 for key, _ in ranking}
    return {key: (score - low) / (high - low) for key, score in ranking}


def weighted(lexical: list[tuple[str, float]], dense: list[tuple[str, float]], alpha: float = DEFAULT_ALPHA) -> dict[str, float]:
    lex, den = _min_max(lexical), _min_max(dense)
    return {key: alpha * den.get(key, 0.0) + (1 - alpha) * lex.get(key, 0.0) for key in {*lex, *den}}


def fuse(method: FusionMethod, lexical: list[tuple[str, float]], dense: list[tuple[str, float]], alpha: float = DEFAULT_ALPHA) -> list[tuple[str, float]]:
    scores = rrf([lexical, dense]) if method is FusionMethod.rrf else weighted(lexical, dense, alpha)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
