"""Combine a lexical and a dense ranking of incidents.

- ``rrf``: reciprocal-rank fusion, ``score = Σ 1 / (60 + rank)`` over the lists an
  incident appears in (ranks start at 1).
- ``weighted``: each list's scores are min-max normalised to [0, 1] over its
  candidates, then ``score = α·dense + (1 − α)·lexical`` (missing = 0).

``incidentlib eval`` compares the two; the better one is the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

#: The usual RRF constant: damps the head so one list's first place cannot dominate.
RRF_K = 60
#: Dense share in weighted fusion, chosen by ``incidentlib eval`` (best MRR on eval/queries.jsonl).
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


#: Score spans below this are treated as "all equal" (float noise, not a ranking).
FLAT_SPAN = 1e-12


def min_max(scores: Mapping[str, float], zero_stays_zero: bool = False) -> dict[str, float]:
    """``(s − min) / (max − min)`` per key.

    When every score is equal (span < :data:`FLAT_SPAN`) each becomes 1.0, or, with
    ``zero_stays_zero``, 0.0 where the score is ≤ 0 (a constant zero is "no evidence", not "best").
    """
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high - low < FLAT_SPAN:
        return {key: (1.0 if score > 0 or not zero_stays_zero else 0.0) for key, score in scores.items()}
    return {key: (score - low) / (high - low) for key, score in scores.items()}


def weighted(lexical: list[tuple[str, float]], dense: list[tuple[str, float]], alpha: float = DEFAULT_ALPHA) -> dict[str, float]:
    lex, den = min_max(dict(lexical)), min_max(dict(dense))
    return {key: alpha * den.get(key, 0.0) + (1 - alpha) * lex.get(key, 0.0) for key in {*lex, *den}}


def fuse(method: FusionMethod, lexical: list[tuple[str, float]], dense: list[tuple[str, float]], alpha: float = DEFAULT_ALPHA) -> list[tuple[str, float]]:
    scores = rrf([lexical, dense]) if method is FusionMethod.rrf else weighted(lexical, dense, alpha)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
