"""From an MFU curve to a shape, its likely causes and the incidents that show it.

Incidents are ranked by the concepts they share with the shape (or a signal):

``score(i) = Σ_{c ∈ concepts ∩ concepts(i)} weight(kind c) · ln(1 + N / df(c))``

with ``weight`` = 1.0 for symptoms, 0.8 for causes and 0.5 for components (what was seen
counts most, the parts involved least), ``df(c)`` the number of incidents carrying ``c``
or a narrower concept, and ``N`` the number of published incidents.  Scores are divided
by the best one; incidents the shape table names (IL-0025 for the IL-0025 shapes) come first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..views import ConceptRef, RankedIncident, SeriesDiagnosis, SeriesFeatures, ShapeScore
from .series import Series
from .shapes import DIP_SHARE, Verdict, classify, rule_score
from .tables import Shape, ShapeTable

if TYPE_CHECKING:
    from ..library import Library

KIND_WEIGHT = {"symptoms": 1.0, "causes": 0.8, "components": 0.5}
CHART_WIDTH = 64
BLOCKS = " ▁▂▃▄▅▆▇█"
# Drift is marked on the chart when a segment loses more than this share (the gc-drift rule's floor).
CHART_DRIFT = 0.1
# Dips are marked only when they recur (the thermal-throttle rule's periodicity floor); lone noise is not a dip.
CHART_PERIODIC = 0.35


def rank_by_concepts(library: Library, concepts: dict[str, list[str]], lang: str, limit: int,
                     pinned: list[str] | None = None) -> list[RankedIncident]:
    """Incidents sharing the given symptoms/causes/components, rarer concepts weighing more."""
    kg = library._knowledge
    incidents = [i for i in library.incidents() if not i.is_draft]
    n = len(incidents)
    expanded = {field: {c: {c, *kg.descendants(c)} for c in ids} for field, ids in concepts.items()}
    scores: dict[str, float] = {}
    shared: dict[str, list[str]] = {}
    for incident in incidents:
        total = 0.0
        for field, by_concept in expanded.items():
            have = set(getattr(incident, field))
            for concept_id, accepted in by_concept.items():
                if have & accepted:
                    df = sum(1 for other in incidents if set(getattr(other, field)) & accepted)
                    total += KIND_WEIGHT[field] * math.log(1 + n / max(1, df))
                    shared.setdefault(incident.id, []).append(concept_id)
        if total > 0:
            scores[incident.id] = total
    best = max(scores.values(), default=1.0)
    pins = [i for i in (pinned or []) if i in library.data.incidents]
    order = pins + sorted((i for i in scores if i not in pins), key=lambda i: (-scores[i], i))
    ranked = []
    for incident_id in order[:limit]:
        incident = library.get(incident_id)
        ranked.append(RankedIncident(
            id=incident_id, title=incident.title.get(lang), score=round(scores.get(incident_id, 0.0) / best, 4),
            pinned=incident_id in pins,
            shared=[kg.concept_ref(c, lang) for c in dict.fromkeys(shared.get(incident_id, []))],
        ))
    return ranked


def _features(verdict: Verdict) -> SeriesFeatures:
    f = verdict.features

    def r(value: float | None, digits: int = 3) -> float | None:
        return None if value is None else round(float(value), digits)

    return SeriesFeatures(
        points=f.points, duration_s=round(f.duration_s, 1), step_s=round(f.step_s, 3), warmup_s=round(f.warmup_s, 1),
        pauses=f.pauses, dropped_share=round(f.dropped_share, 3), level=r(f.level), good_level=r(f.good_level),
        drift=r(f.drift), recovery=r(f.recovery), restarts=[round(t, 1) for t in f.restarts],
        restarts_marked=f.restarts_marked, dip_period_s=r(f.dip_period_s, 1), periodicity=r(f.periodicity),
        dip_depth=r(f.dip_depth), throttle_overlap=r(f.throttle_overlap),
    )


def chart(verdict: Verdict, width: int = CHART_WIDTH) -> str:
    """Three lines: a block sparkline (full block = expected MFU), markers, and the time axis."""
    cleaned = verdict.cleaned
    if cleaned is None or len(cleaned.t) < 2:
        return "(not enough points to draw)"
    t, v = cleaned.t, cleaned.v
    edges = np.linspace(t[0], t[-1], width + 1)
    column = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, width - 1)
    top = max(1.0, float(np.percentile(v, 99)))
    good = float(np.percentile(v, 90))
    residual = v - cleaned.trend
    bars, marks = [], []
    drift_cols: set[int] = set()
    for a, b in cleaned.segments:
        if b - a > 2 and t[b - 1] > t[a]:
            loss = (cleaned.trend[a] - cleaned.trend[b - 1]) / good
            if loss > CHART_DRIFT:
                drift_cols.update(range(int(column[a]), int(column[b - 1]) + 1))
    restart_cols = {int(column[a]) for a, _ in cleaned.segments[1:]}
    periodic = (verdict.features.periodicity or 0.0) >= CHART_PERIODIC
    for col in range(width):
        inside = column == col
        if not inside.any():
            bars.append(" ")
            marks.append(" ")
            continue
        level = float(np.median(v[inside]))
        bars.append(BLOCKS[max(1, min(len(BLOCKS) - 1, round(level / top * (len(BLOCKS) - 1))))])
        if col in restart_cols:
            marks.append("|")
        elif periodic and bool(np.any(residual[inside] < -DIP_SHARE * good)):
            marks.append("v")
        elif col in drift_cols:
            marks.append("\\")
        else:
            marks.append(" ")
    span = t[-1] - t[0]
    unit, scale = ("h", 3600.0) if span >= 7200 else ("min", 60.0) if span >= 120 else ("s", 1.0)
    left, right = "0", f"{span / scale:.0f} {unit}"
    axis = left + " " * max(1, width - len(left) - len(right)) + right
    return "\n".join(["".join(bars), "".join(marks).rstrip(), axis])


def _evidence(shape: Shape, verdict: Verdict, table: ShapeTable, lang: str) -> list[str]:
    lines = []
    for rule in shape.rules:
        value = verdict.features.value(rule.feature)
        if value is None:
            missing = "측정 안 됨" if lang == "ko" else "not measured"
            lines.append(f"{rule.feature}: {missing}" + (f" ({rule.why.get(lang)})" if rule.why else ""))
            continue
        if rule_score(rule, value, table.tolerances[rule.feature]) > 0:
            bounds = " and ".join(x for x in (f"≥ {rule.min:g}" if rule.min is not None else "",
                                              f"≤ {rule.max:g}" if rule.max is not None else "") if x)
            lines.append(f"{rule.feature} = {value:.2f} ({bounds})" + (f": {rule.why.get(lang)}" if rule.why else ""))
    return lines


def diagnose_series(library: Library, series: Series, table: ShapeTable, lang: str, limit: int) -> SeriesDiagnosis:
    verdict = classify(series, table)
    vocab = library.vocab
    scores = [ShapeScore(id=s.id, label=s.label.get(lang), score=verdict.scores.get(s.id, 0.0)) for s in table.shapes]
    scores.sort(key=lambda s: -s.score)
    shape = table.get(verdict.shape) if verdict.shape else None
    if shape is None:
        reason = verdict.reason or "no shape"
        note = f"판단할 수 없습니다: {reason}" if lang == "ko" else f"Cannot tell: {reason}"
        return SeriesDiagnosis(
            shape=None, label=None, description=None, confidence=0.0, cannot_tell=note, evidence=[], likely=None,
            features=_features(verdict), scores=scores, symptoms=[], causes=[], components=[], incidents=[],
            chart=chart(verdict),
        )
    concepts = {"symptoms": shape.symptoms, "causes": shape.causes, "components": shape.components}
    incidents = rank_by_concepts(library, concepts, lang, limit, pinned=shape.incidents) if any(concepts.values()) else []

    def refs(kind: str, ids: list[str]) -> list[ConceptRef]:
        return [ConceptRef(id=i, kind=kind, label=vocab.label(i, lang)) for i in ids]

    return SeriesDiagnosis(
        shape=shape.id, label=shape.label.get(lang), description=shape.description.get(lang), confidence=verdict.confidence,
        cannot_tell=None, evidence=_evidence(shape, verdict, table, lang), likely=shape.likely.get(lang),
        features=_features(verdict), scores=scores, symptoms=refs("symptom", shape.symptoms),
        causes=refs("cause", shape.causes), components=refs("component", shape.components), incidents=incidents,
        chart=chart(verdict),
    )
