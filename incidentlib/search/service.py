"""Search and "find incidents like this", with explanations.

``similar`` combines text similarity with graph evidence:

    score = (1 − β) · text + β · graph          (β = 0.35)

where ``text`` is the hybrid (or, for an incident, dense) score min-max
normalised over the candidates, and ``graph`` is the sum of the weights
``ln(1 + N / df(c))`` of the concepts the candidate shares with the query,
normalised the same way.  For an incident the shared concepts are its
components and causes (as in ``related``); for free text they are the
components, causes and symptoms recognised in the text through the
vocabulary's labels and aliases in both languages.
"""

from __future__ import annotations

import re
from functools import cached_property

from ..graph.knowledge import KnowledgeGraph
from ..models import Incident
from ..requests import check_query
from ..views import MatchedChunk, SearchResult, Why
from .concepts import ConceptRecognizer, Mention
from .engine import Hit, SearchEngine, SearchMode
from .fusion import min_max

#: β, the graph share of a "similar" score: chosen by ``incidentlib eval`` (the similar row; higher hurt R@5).
GRAPH_WEIGHT = 0.35
#: Snippet length: two lines of a terminal or a result card.
SNIPPET_CHARS = 240
#: Candidates per result before re-ranking, and the floor: enough for the graph evidence to lift an incident in.
CANDIDATES_PER_RESULT = 5
MIN_CANDIDATES = 50


def candidate_depth(k: int) -> int:
    """How many incidents each ranking contributes before "similar" re-ranks them: max(5·k, 50)."""
    return max(k * CANDIDATES_PER_RESULT, MIN_CANDIDATES)
SIMILAR_KINDS = ("component", "cause", "symptom")




class SearchService:
    """Turns engine hits into explained results; knows nothing of HTTP or the CLI."""

    def __init__(self, engine: SearchEngine, knowledge: KnowledgeGraph, recognizer: ConceptRecognizer | None = None) -> None:
        """``recognizer`` reuses one built for the same vocabulary (building it compiles ~1,500 patterns)."""
        self.engine = engine
        self.knowledge = knowledge
        self._given_recognizer = recognizer

    @cached_property
    def recognizer(self) -> ConceptRecognizer:
        return self._given_recognizer or ConceptRecognizer(self.engine.data.vocab)

    # ---- search ----------------------------------------------------------------
    def search(self, query: str, k: int = 10, mode: SearchMode = SearchMode.hybrid, allowed: set[str] | None = None,
               lang: str = "en") -> list[SearchResult]:
        query = check_query(query)
        mentions = self.recognizer.recognise(query)
        hits = self.engine.search(query, k=k, mode=mode, allowed=allowed)
        return [self._result(hit, query, mentions, lang) for hit in hits]

    # ---- similar ---------------------------------------------------------------
    def similar_to_text(self, text: str, k: int = 10, allowed: set[str] | None = None, lang: str = "en") -> list[SearchResult]:
        text = check_query(text)
        mentions = [m for m in self.recognizer.recognise(text) if m.kind in SIMILAR_KINDS]
        depth = candidate_depth(k)
        lexical = self.engine.rank_lexical(text, allowed, depth)
        dense = self.engine.rank_dense(text, allowed, depth)
        hits = self.engine.fuse_rankings(lexical, dense, depth)
        concept_ids = {m.concept_id for m in mentions}
        # incidents that carry a recognised concept are candidates even if the text missed them
        for incident_id in self._incidents_with(concept_ids, allowed):
            if all(h.incident_id != incident_id for h in hits):
                hits.append(Hit(incident_id, 0.0, self._title_chunk(incident_id, lang)))
        graph = {h.incident_id: self._concept_weight_sum(concept_ids, self._concepts(h.incident_id)) for h in hits}
        by_id = {h.incident_id: h for h in hits}
        return self._rank_similar(by_id, {h.incident_id: h.score for h in hits}, graph, text, mentions, lang, k)

    def similar_to_incident(self, incident_id: str, k: int = 10, allowed: set[str] | None = None, lang: str = "en") -> list[SearchResult]:
        source = self.engine.data.incidents[incident_id]
        vector = self.engine.incident_vector(incident_id)
        candidates = None if allowed is None else allowed - {incident_id}
        dense = [r for r in self.engine.rank_dense_vector(vector, candidates, depth=candidate_depth(k) + 1) if r[0] != incident_id]
        related = {item.id: item.score for item in self.knowledge.related(incident_id, lang=lang, limit=None)
                   if candidates is None or item.id in candidates}
        text_scores = {i: s for i, s, _ in dense}
        chunk_of = {i: c for i, _, c in dense}
        for other in related:
            chunk_of.setdefault(other, self._title_chunk(other, lang))
        own = set(self._concepts(incident_id))
        # the source's own components and causes play the part of concepts "recognised" in a query
        mentions = [Mention(c, kind, c) for c in sorted(own) if (kind := self._kind(c)) in ("component", "cause")]
        dense_rank = {i: r for r, (i, _, _) in enumerate(dense, 1)}
        hits = {other: Hit(other, 0.0, chunk, dense_rank=dense_rank.get(other)) for other, chunk in chunk_of.items()}
        return self._rank_similar(hits, text_scores, related, source.title.get(lang), mentions, lang, k)

    # ---- helpers ---------------------------------------------------------------
    @staticmethod
    def _combine(text: dict[str, float], graph: dict[str, float]) -> dict[str, float]:
        """``(1 − β)·minmax(text) + β·minmax(graph)``, β = :data:`GRAPH_WEIGHT`; missing = 0."""
        t, g = min_max(text, zero_stays_zero=True), min_max(graph, zero_stays_zero=True)
        return {key: round((1 - GRAPH_WEIGHT) * t.get(key, 0.0) + GRAPH_WEIGHT * g.get(key, 0.0), 6) for key in {*t, *g}}

    def _rank_similar(self, hits: dict[str, Hit], text: dict[str, float], graph: dict[str, float], query: str,
                      mentions: list[Mention], lang: str, k: int) -> list[SearchResult]:
        """The one "similar" pipeline tail: combine text and graph scores, keep the best k, explain each."""
        combined = self._combine(text, graph)
        ranked = sorted(combined.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [self._result(hits[i], query, mentions, lang, score=score, graph_score=graph.get(i)) for i, score in ranked]

    def _concepts(self, incident_id: str) -> list[str]:
        incident: Incident = self.engine.data.incidents[incident_id]
        return [*incident.components, *incident.causes, *incident.symptoms]

    def _kind(self, concept_id: str) -> str:
        concept = self.engine.data.vocab.get(concept_id)
        return concept.kind.value if concept else ""

    def _incidents_with(self, concept_ids: set[str], allowed: set[str] | None) -> list[str]:
        if not concept_ids:
            return []
        return [
            i for i in self.engine.data.incidents
            if (allowed is None or i in allowed) and concept_ids & set(self._concepts(i))
        ]

    def _concept_weight_sum(self, query_concepts: set[str], incident_concepts: list[str]) -> float:
        total = 0.0
        for concept_id in query_concepts & set(incident_concepts):
            total += self.knowledge.concept_weight(f"{self._kind(concept_id)}:{concept_id}")
        return total

    @cached_property
    def _title_chunks(self) -> dict[tuple[str, str], int]:
        return {(c.incident_id, c.lang): i for i, c in enumerate(self.engine.chunks) if c.kind == "title"}

    def _title_chunk(self, incident_id: str, lang: str = "en") -> int:
        return self._title_chunks[(incident_id, lang)]

    def _result(self, hit: Hit, query: str, mentions: list[Mention], lang: str, score: float | None = None,
                graph_score: float | None = None) -> SearchResult:
        incident = self.engine.data.incidents[hit.incident_id]
        chunk = self.engine.chunks[hit.chunk]
        terms = self.engine.lexical.matched_terms(query, hit.chunk)
        own = set(self._concepts(incident.id)) | {incident.org}
        shared = [self.knowledge.concept_ref(m.concept_id, lang) for m in mentions if m.concept_id in own]
        # a vocabulary match explains *why*, but a list of labels reads badly: show the summary instead
        shown = self.engine.chunks[self._title_chunk(incident.id, lang)].text if chunk.kind == "concepts" else chunk.text
        return SearchResult(
            id=incident.id,
            score=round(float(hit.score if score is None else score), 6),
            title=incident.title.get(lang),
            org=incident.org,
            date=incident.date,
            snippet=snippet(shown, terms),
            why=Why(
                chunk=MatchedChunk(id=chunk.id, kind=chunk.kind, lang=chunk.lang, text=chunk.text),
                matched_terms=terms,
                shared_concepts=shared,
                lexical_rank=hit.lexical_rank,
                dense_rank=hit.dense_rank,
                graph_score=None if graph_score is None else round(graph_score, 4),
            ),
        )


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first matched term (or its start)."""
    if len(text) <= width:
        return text
    start = 0
    lowered = text.lower()
    for term in terms:
        position = lowered.find(term.lower())
        if position >= 0:
            start = max(0, position - width // 3)
            break
    window = text[start : start + width]
    if start > 0:
        window = "…" + window.split(" ", 1)[-1] if " " in window[:20] else "…" + window
    if start + width < len(text):
        window = re.sub(r"\s+\S*$", "", window) + "…"
    return window

