"""Diagnosis: from symptoms and pasted error text to likely causes and components.

For each candidate cause (and component) ``c``:

- **co-occurrence** — for the given or recognised symptoms ``s``, the share of
  incidents with ``s`` that also have ``c``, averaged over the symptoms;
- **text** — the similarity-weighted share of the incidents most like the pasted
  text (``similar``) that have ``c``.

``score = 0.5 · co-occurrence + 0.5 · text`` when both are available, otherwise the
one that is.  Every candidate lists the incidents behind it.  Confidence is ``low``
when the best candidate rests on fewer than two incidents or scores under 0.2,
``high`` when it rests on three or more and scores at least 0.4.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ..errors import FilterError, InvalidRequest
from ..models import ConceptKind
from ..search.tokenize import VOLATILE_TOKENS
from ..views import Candidate, Diagnosis, EvidenceIncident
from .signatures import match_signals

if TYPE_CHECKING:
    from ..library import Library

#: Incidents most like the pasted text that vote for causes: the head of the ranking, where similarity means something.
SIMILAR_DEPTH = 10
#: Weight of co-occurrence in ``score`` when text evidence is also present (text gets the rest): the two
#: kinds of evidence count equally; chosen by hand, not tuned.
COOCCURRENCE_WEIGHT = 0.5
#: Evidence order only: an incident backing a cause through a shared symptom ranks below every incident
#: backing it through text similarity (those rank at ``1 + similarity``).
SYMPTOM_EVIDENCE_RANK = 0.5
#: Confidence thresholds on the best cause (support = incidents behind it, score as above).  Hand-set
#: rules of thumb, not tuned on an evaluation: one incident is an anecdote (``low`` under two), three
#: agreeing incidents a pattern (``high``); the score cut-offs were chosen by hand.
LOW_SUPPORT = 2
LOW_SCORE = 0.2
HIGH_SUPPORT = 3
HIGH_SCORE = 0.4
#: Evidence incidents listed per candidate, and similar incidents listed in a diagnosis.
EVIDENCE_SHOWN = 5
#: Decimal places of reported scores.
SCORE_DECIMALS = 4


def diagnose(library: Library, symptoms: list[str] | None = None, text: str | None = None, lang: str = "en",
             limit: int = 5) -> Diagnosis:
    symptoms = symptoms or []
    if not symptoms and not (text and text.strip()):
        raise InvalidRequest("give symptoms, text, or both")
    vocab = library.vocab
    kg = library._knowledge
    symptom_ids: list[str] = []
    recognizer = library._search_service.recognizer
    for index, name in enumerate(symptoms):
        concept = vocab.resolve(name, ConceptKind.symptom)
        if concept is None:  # a free phrase such as "링크 플래핑": accept the one symptom it names
            named = [m.concept_id for m in recognizer.recognise(name) if m.kind == "symptom"]
            concept = vocab.get(named[0]) if len(named) == 1 else None
        if concept is None:
            hint = vocab.suggest(name, ConceptKind.symptom)
            raise FilterError(f"symptoms: unknown symptom {name!r}" + (f" (did you mean {', '.join(hint)}?)" if hint else ""),
                              parameter="symptoms", path=(index,))
        symptom_ids.append(concept.id)
    recognised = []
    similar: list[EvidenceIncident] = []
    readable = True
    if text and text.strip():
        for mention in recognizer.recognise(text):
            if mention.kind == "symptom" and mention.concept_id not in symptom_ids:
                symptom_ids.append(mention.concept_id)
            elif mention.kind in ("component", "cause"):
                recognised.append(kg.concept_ref(mention.concept_id, lang))
        response = library.similar(text=text, k=SIMILAR_DEPTH, lang=lang)
        similar = [EvidenceIncident(id=r.id, title=r.title, score=r.score) for r in response.results if r.score > 0]
        # the library could read something of the text: a word some similar incident also has, or a concept by name
        # (a placeholder such as <num> says only that the text is a log line: it is not a word of it)
        readable = bool(symptom_ids or recognised) or any(set(r.why.matched_terms) - VOLATILE_TOKENS
                                                           for r in response.results if r.why)

    # the published incidents' curated concepts, read from the library's columns (no record is read or kept for them)
    facets = library._facets
    text_weight = {e.id: e.score for e in similar}

    def rank(field: str, kind: str) -> list[Candidate]:
        cooc: dict[str, float] = defaultdict(float)
        backers: dict[str, dict[str, float]] = defaultdict(dict)
        column = facets.values[field]
        for symptom in symptom_ids:
            with_symptom = [row for row in facets.holders("symptoms", symptom) if not facets.drafts[row]]
            for row in with_symptom:
                incident_id = facets.ids[row]
                for concept_id in column[row]:
                    cooc[concept_id] += 1 / (len(with_symptom) * len(symptom_ids))
                    backers[concept_id][incident_id] = max(backers[concept_id].get(incident_id, 0.0), SYMPTOM_EVIDENCE_RANK)
        text_part: dict[str, float] = defaultdict(float)
        total = sum(text_weight.values())
        kind_of_field = {"components": "component", "causes": "cause", "symptoms": "symptom"}[field]
        for incident_id, weight in text_weight.items():
            neighbour = library.get(incident_id)
            # curated links count fully, inferred ones with their confidence
            held = dict.fromkeys(getattr(neighbour, field), 1.0)
            for link in neighbour.proposed(kind_of_field):
                held[link.concept] = max(held.get(link.concept, 0.0), link.confidence)
            for concept_id, confidence in held.items():
                text_part[concept_id] += confidence * weight / total
                backers[concept_id][incident_id] = max(backers[concept_id].get(incident_id, 0.0), 1.0 + weight)
        both = bool(symptom_ids) and bool(text_weight)
        scores = {c: (COOCCURRENCE_WEIGHT * cooc[c] + (1 - COOCCURRENCE_WEIGHT) * text_part[c]) if both else (cooc[c] or text_part[c]) for c in {*cooc, *text_part}}
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        candidates = []
        for concept_id, score in ranked:
            evidence_ids = sorted(backers[concept_id], key=lambda i: (-backers[concept_id][i], i))
            candidates.append(Candidate(
                id=concept_id, kind=kind, label=vocab.label(concept_id, lang), score=round(score, SCORE_DECIMALS),
                support=len(evidence_ids),
                evidence=[EvidenceIncident(id=i, title=library.get(i).title.get(lang), score=round(text_weight.get(i, 0.0), SCORE_DECIMALS))
                          for i in evidence_ids[:EVIDENCE_SHOWN]],
            ))
        return candidates

    causes = rank("causes", "cause")
    components = rank("components", "component")
    confidence, note = _confidence(causes, symptom_ids, similar, lang, readable)
    signals = match_signals(library.data, facets, text, lang) if text else []
    return Diagnosis(
        symptoms=[kg.concept_ref(s, lang) for s in symptom_ids], recognised=recognised, causes=causes,
        components=components, similar=similar[:EVIDENCE_SHOWN], signals=signals, confidence=confidence, note=note,
        explained=library.explain_signals(text, lang) if text else [],
    )


def _confidence(causes: list[Candidate], symptom_ids: list[str], similar: list[EvidenceIncident], lang: str,
                readable: bool = True) -> tuple[str, str]:
    if not causes:
        return "low", ("근거가 없습니다: 라이브러리에서 맞는 사례를 찾지 못했습니다." if lang == "ko"
                       else "No evidence: nothing in the library matches these symptoms or this text.")
    if not readable:
        # the scores are relative to the nearest incidents, which are near by embedding alone: they say nothing
        return "low", ("근거가 없습니다: 글의 어떤 단어도, 어떤 개념 이름도 라이브러리 사례와 겹치지 않아 아래 순위는 "
                       "임베딩이 가장 가까운 사례에서 나온 것일 뿐입니다." if lang == "ko"
                       else "No evidence: no word of the text and no concept named in it occurs in the library's "
                            "incidents, so the ranking below only reflects the incidents nearest by embedding.")
    best = causes[0]
    if best.support < LOW_SUPPORT or best.score < LOW_SCORE:
        level = "low"
    elif best.support >= HIGH_SUPPORT and best.score >= HIGH_SCORE:
        level = "high"
    else:
        level = "medium"
    if lang == "ko":
        note = f"가장 유력한 원인은 '{best.label}'이며 사례 {best.support}건이 뒷받침합니다."
        if level == "low":
            note = f"근거가 약합니다: '{best.label}'을 뒷받침하는 사례가 {best.support}건뿐이고 점수가 {best.score:.2f}입니다. 참고로만 보세요."
    else:
        note = f"The most likely cause is '{best.label}', backed by {best.support} incident(s)."
        if level == "low":
            note = (f"Evidence is thin: '{best.label}' rests on {best.support} incident(s) with a score of {best.score:.2f}; "
                    "treat it as a lead, not an answer.")
    if not symptom_ids and lang != "ko":
        note += " No symptom was recognised; the ranking comes from similar incidents alone."
    elif not symptom_ids:
        note += " 인식된 증상이 없어 비슷한 사례만으로 순위를 매겼습니다."
    return level, note
