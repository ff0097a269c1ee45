"""Recognise components, causes and symptoms in text and turn them into inferred links.

Four methods; a name or signal found and the classifier are combined per concept by noisy-OR,
``c = 1 − (1 − c_alias)(1 − c_classifier)``:

- ``alias``: a label or alias of the concept is written in the text (both languages, the
  rules of :class:`~incidentlib.search.concepts.ConceptRecognizer`); confidence
  ``ALIAS_CONFIDENCE``; the evidence is the sentence around the match;
- ``loose-alias``: a Latin label or alias of two or more words is written with a content word between two of its
  words ("bad firewall config" for "bad config", :class:`~.loose.LooseNames`); confidence ``LOOSE_ALIAS_CONFIDENCE``;
- ``signal``: an error message the signal table knows ("Xid 79", "Back-off restarting failed container") is written
  in the text, and the table lists the concept for it (:class:`~.signals.SignalConcepts`); confidence
  ``SIGNAL_CONFIDENCE``; the evidence is the line it was found in;
- ``classifier``: :class:`ConceptClassifier` learnt from curated links; confidence is its
  probability; the evidence is the sentence that weighs most for the concept.

A link whose concept the record already carries as a curated link is never proposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..models import INFERRED_KINDS, LANGS, ConceptKind, Incident, InferenceMethod, InferredLink
from ..search.concepts import ConceptRecognizer
from ..vocab import Vocabulary
from .classifier import PROPOSE_PROBABILITY, ConceptClassifier, split_sentences
from .loose import LooseNames

if TYPE_CHECKING:  # the signal table's module loads the analysis package (NetworkX): not for a search
    from .signals import SignalConcepts

# A name written in the text is direct evidence, but it may be a mention in passing
# ("unlike the DNS outage last year"), so it is not certainty.
ALIAS_CONFIDENCE = 0.8
# A name with a content word inside ("bad firewall config") is as direct a mention as the name written whole: over the
# English texts of the bundled library, 11 of the 16 such matches name a concept its curators linked, against 1,302 of
# 2,697 for names written whole (docs/search.md). So the same confidence; the method keeps them apart for a reviewer.
LOOSE_ALIAS_CONFIDENCE = ALIAS_CONFIDENCE
# A known error message is as direct a mention as a name: over the bundled library's own text, 81 of the 136 components
# and symptoms the signal table gives for the signals found there are curated links of the record (60 %), against 1,302
# of 2,697 (48 %) for names written whole (docs/search.md, "Error messages as evidence of concepts"). So the same
# confidence.
SIGNAL_CONFIDENCE = ALIAS_CONFIDENCE
# Evidence is shown to a reviewer: one sentence, cut to a readable length.
EVIDENCE_CHARS = 200
_INFERRED_KIND_VALUES = frozenset(k.value for k in INFERRED_KINDS)


def incident_text(incident: Incident, lang: str | None = None) -> str:
    """Title, summary, body, detection, mitigation, lessons and signals; one language or both.

    A field repeated word for word (an import that filled title, summary and body from one
    sentence) is kept once.
    """
    parts: list[str] = []
    for code in LANGS if lang is None else (lang,):
        for field in (incident.title, incident.summary, incident.body, incident.detection, incident.mitigation, *incident.lessons):
            value = getattr(field, code, None) if field is not None else None
            if value and value.strip() not in parts:
                parts.append(value.strip())
    if lang is None or parts:
        parts.extend(s.text for s in incident.signals)
    return "\n\n".join(parts)


def _sentence_around(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    right_candidates = [i for i in (text.find(". ", end), text.find("\n", end)) if i >= 0]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    sentence = " ".join(text[left + 1 : right].split())
    if len(sentence) > EVIDENCE_CHARS:
        offset = max(0, (start - left - 1) - EVIDENCE_CHARS // 2)
        sentence = "…" + sentence[offset : offset + EVIDENCE_CHARS].strip() + "…"
    return sentence


def _excerpt(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 1] + "…"


class ConceptTagger:
    """``infer(texts)`` → inferred links per text, best first (batch-first)."""

    def __init__(self, vocab: Vocabulary, classifier: ConceptClassifier | None = None,
                 signals: SignalConcepts | None = None) -> None:
        """``signals``: the signal table's concepts (none: error messages count only through their words)."""
        self.vocab = vocab
        self.recognizer = ConceptRecognizer(vocab)
        self.loose = LooseNames(vocab)
        self.classifier = classifier
        self.signals = signals

    def _alias_links(self, text: str) -> dict[str, InferredLink]:
        links: dict[str, InferredLink] = {}
        for mention, start, end in self.recognizer.spans(text):
            if mention.kind not in _INFERRED_KIND_VALUES:
                continue
            links[mention.concept_id] = InferredLink(
                concept=mention.concept_id, kind=ConceptKind(mention.kind), evidence=_sentence_around(text, start, end),
                method=InferenceMethod.alias, confidence=ALIAS_CONFIDENCE,
            )
        for loose in self.loose.find(text, skip=set(links)):
            links[loose.concept_id] = InferredLink(
                concept=loose.concept_id, kind=ConceptKind(loose.kind), evidence=_sentence_around(text, loose.start, loose.end),
                method=InferenceMethod.loose_alias, confidence=LOOSE_ALIAS_CONFIDENCE,
            )
        for found in self.signals.find(text, skip=set(links)) if self.signals is not None else ():
            links[found.concept_id] = InferredLink(
                concept=found.concept_id, kind=found.kind, evidence=_excerpt(found.excerpt), method=InferenceMethod.signal,
                confidence=SIGNAL_CONFIDENCE,
            )
        return links

    def infer(self, texts: Sequence[str], exclude: Sequence[set[str]] | None = None) -> list[list[InferredLink]]:
        probabilities = self.classifier.probabilities(texts) if self.classifier is not None else None
        results: list[list[InferredLink]] = []
        for row, text in enumerate(texts):
            links = self._alias_links(text)
            if probabilities is not None and self.classifier is not None:
                for column, concept_id in enumerate(self.classifier.concepts):
                    p = float(probabilities[row, column])
                    concept = self.vocab.get(concept_id)
                    if concept is None or concept.kind not in INFERRED_KINDS:
                        continue
                    if concept_id in links:
                        alias = links[concept_id]
                        links[concept_id] = alias.model_copy(update={"confidence": round(1 - (1 - alias.confidence) * (1 - p), 4)})
                    elif p >= PROPOSE_PROBABILITY:
                        evidence = self.classifier.evidence(text, concept_id)[:EVIDENCE_CHARS]
                        links[concept_id] = InferredLink(concept=concept_id, kind=concept.kind, evidence=evidence or text[:EVIDENCE_CHARS],
                                                         method=InferenceMethod.classifier, confidence=round(p, 4))
            skip = exclude[row] if exclude is not None else set()
            ranked = sorted((link for c, link in links.items() if c not in skip), key=lambda link: (-link.confidence, link.concept))
            results.append(ranked)
        return results

    def infer_incidents(self, incidents: Sequence[Incident]) -> list[list[InferredLink]]:
        """Links for records, never for a concept a record already carries as a curated link."""
        curated = [{*i.components, *i.causes, *i.symptoms} for i in incidents]
        return self.infer([incident_text(i) for i in incidents], exclude=curated)


def sentences(text: str) -> list[str]:
    return split_sentences(text)



