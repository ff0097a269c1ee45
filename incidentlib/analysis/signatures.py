"""Error-signature explanations: what a verbatim error line in the library means.

An explanation is assembled from the record the signal belongs to, in either
language: the curator's note when there is one, the symptoms it goes with, what
caused it there, and how many other incidents share those symptoms.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..facets import Facets
from ..loader import LibraryData, each_record
from ..models import Incident
from ..search.tokenize import tokenize
from ..views import SignalExplanation
from ..vocab import Vocabulary

# Share of a signal's tokens that must appear in the pasted text: a majority, so a log line that has
# lost or changed a few tokens (ids, numbers, hosts) still matches.  Chosen by hand; not tuned.
MIN_MATCH = 0.5
#: Signals returned by ``match_signals`` and other incidents named in one explanation.
SIGNALS_SHOWN = 5

PHRASES = {
    "en": {"seen": "Seen in {id} ({org}): {title}.", "symptoms": "It went with: {}.",
           "causes": "There it was caused by: {}.", "others": "{} other incident(s) show the same symptoms: {}."},
    "ko": {"seen": "{id}({org})에서 나타난 메시지입니다: {title}.", "symptoms": "함께 보인 증상: {}.",
           "causes": "그때의 원인: {}.", "others": "같은 증상을 보인 다른 사례 {}건: {}."},
}


@dataclass(frozen=True)
class KnownSignal:
    text: str
    incident_id: str
    tokens: frozenset[str]


def library_signals(data: LibraryData) -> list[KnownSignal]:
    """Every record's signals, read in one pass that keeps no record (:func:`~incidentlib.loader.each_record`)."""
    return [
        KnownSignal(signal.text, incident.id, frozenset(tokenize(signal.text)))
        for incident in each_record(data.incidents)
        for signal in incident.signals
    ]


@dataclass(frozen=True)
class Sharers:
    """The incidents that hold any of a set of symptoms: how many, and the first ids in id order, one more than an
    explanation names so that the incident explained can be left out of them."""

    count: int
    first: tuple[str, ...]

    @classmethod
    def of(cls, facets: Facets, symptoms: tuple[str, ...]) -> Sharers:
        rows = set().union(*(facets.holders("symptoms", symptom) for symptom in symptoms))
        return cls(len(rows), tuple(heapq.nsmallest(SIGNALS_SHOWN + 1, (facets.ids[row] for row in rows))))


def explain(data: LibraryData, facets: Facets, signal: KnownSignal, lang: str) -> str:
    """A signal in words (:func:`explain_in`), its incident read by id."""
    return explain_in(data.incidents[signal.incident_id], data.vocab, facets, signal.text, lang)


def explain_in(incident: Incident, vocab: Vocabulary, facets: Facets, text: str, lang: str,
               sharers: dict[tuple[str, ...], Sharers] | None = None) -> str:
    """The signal ``text`` of ``incident`` in words: its note, the incident, its symptoms and causes, and the other
    incidents that share a symptom with it (from ``facets``' symptom column, read from the data ``incident`` belongs
    to: no other record is read).

    ``sharers`` remembers, by symptom set, who shares those symptoms, for a caller that explains many signals: at
    100k incidents a common symptom has tens of thousands of holders, and most signals' incidents repeat a symptom
    set another signal's incident has, so gathering the holders for each signal anew is quadratic."""
    note = next((s.note.get(lang) for s in incident.signals if s.text == text and s.note), None)
    symptoms = ", ".join(vocab.label(s, lang) for s in incident.symptoms)
    causes = ", ".join(vocab.label(c, lang) for c in incident.causes)
    key = tuple(sorted(set(incident.symptoms)))
    shared = sharers.get(key) if sharers is not None else None
    if shared is None:
        shared = Sharers.of(facets, key)
        if sharers is not None:
            sharers[key] = shared
    itself = 1 if key else 0  # the incident holds its own symptoms in the column too
    others = [other for other in shared.first if other != incident.id][:SIGNALS_SHOWN]
    phrases = PHRASES[lang]
    parts = [note] if note else []
    parts.append(phrases["seen"].format(id=incident.id, org=vocab.label(incident.org, lang), title=incident.title.get(lang)))
    if symptoms:
        parts.append(phrases["symptoms"].format(symptoms))
    if causes:
        parts.append(phrases["causes"].format(causes))
    if others:
        parts.append(phrases["others"].format(shared.count - itself, ", ".join(others)))
    return " ".join(parts)


def match_signals(data: LibraryData, facets: Facets, text: str, lang: str, limit: int = SIGNALS_SHOWN) -> list[SignalExplanation]:
    """Library signals whose tokens mostly appear in ``text`` (a pasted log), best first."""
    pasted = set(tokenize(text))
    found = []
    for signal in library_signals(data):
        if not signal.tokens:  # e.g. a bare symbol: nothing to match on
            continue
        share = len(signal.tokens & pasted) / len(signal.tokens)
        if share >= MIN_MATCH:
            found.append((share, signal))
    found.sort(key=lambda item: (-item[0], item[1].incident_id))
    return [SignalExplanation(signal=s.text, incident_id=s.incident_id, explanation=explain(data, facets, s, lang), matched=round(share, 3))
            for share, s in found[:limit]]
