"""Search and "find incidents like this", with explanations.

``similar`` (by incident or by text) is one pipeline, :class:`~.similarity.SimilarityIndex`:
lexical, passage-level dense and graph evidence, each standardised over the candidates
and averaged; ``why`` gives the passage that matched, the terms that weighed most, the
shared concepts (inferred ones marked) and the evidence before fusion.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

from ..graph.knowledge import KnowledgeGraph
from ..models import Incident
from ..requests import MAX_SIMILAR_TEXT_CHARS, check_query
from ..tagging.tagger import ConceptTagger
from ..views import MatchedChunk, SearchResult, Why
from .chunks import RAW_LANG, Chunk
from .concepts import ConceptRecognizer, Mention
from .engine import Hit, SearchEngine, SearchMode

if TYPE_CHECKING:
    from .similarity import Evidence, SimilarityIndex

#: Snippet length: two lines of a terminal or a result card.
SNIPPET_CHARS = 240




class SearchService:
    """Turns engine hits into explained results; knows nothing of HTTP or the CLI."""

    def __init__(self, engine: SearchEngine, knowledge: KnowledgeGraph, recognizer: ConceptRecognizer | None = None) -> None:
        """``recognizer`` reuses one built for the same vocabulary (building it compiles ~1,500 patterns)."""
        self.engine = engine
        self.knowledge = knowledge
        self._tagger: ConceptTagger | None = None
        self.tagger_factory: Callable[[], ConceptTagger] | None = None
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

    def passages(self, query: str, k: int = 5, allowed: set[str] | None = None,
                 lang: str = "en") -> list[tuple[Hit, Chunk]]:
        """The hybrid search's hits, each with :meth:`passage`: text of the incident's own to quote for ``query``.
        A hit whose incident has no passage of text at all (every text blank) is left out."""
        query = check_query(query)
        found = []
        for hit in self.engine.search(query, k=k, mode=SearchMode.hybrid, allowed=allowed):
            chunk = self.passage(hit.incident_id, hit.chunk, query, lang)
            if chunk is not None:
                found.append((hit, chunk))
        return found

    def passage(self, incident_id: str, chunk_index: int, query: str, lang: str = "en") -> Chunk | None:
        """The incident's best passage of its own text for ``query``, in ``lang`` when it has text in ``lang``.

        The matched chunk when it is real text in ``lang`` (or a verbatim signal).  Otherwise, and always for the
        ``concepts`` chunk (vocabulary labels and aliases, which the record never says: its "Route 53" is an alias
        of DNS, not a claim), the incident's title, body, detail or signal chunk sharing the most query terms,
        or its title and summary when none shares one; in ``lang`` when the incident is written in it, else in
        the language it is written in.  None when the incident has no passage of text at all."""
        chunks = self.engine.chunks
        chunk = chunks[chunk_index]
        if chunk.kind != "concepts" and chunk.lang in (lang, RAW_LANG):
            return chunk
        rows = [row for row in self.engine.incident_rows(incident_id) if chunks[row].kind != "concepts"]
        in_lang = [row for row in rows if chunks[row].lang in (lang, RAW_LANG)]
        if any(chunks[row].lang == lang for row in in_lang):
            rows = in_lang
        if not rows:
            return None
        best = self.engine.lexical.most_matched(query, rows)
        return chunks[rows[0] if best is None else best]

    # ---- similar ---------------------------------------------------------------
    @cached_property
    def similarity(self) -> SimilarityIndex:
        from .similarity import SimilarityIndex  # SciPy's sparse matrices: only for `similar`

        return SimilarityIndex(self.engine)

    @property
    def tagger(self) -> ConceptTagger:
        """Recognises concepts in pasted text; the library may install one with a trained classifier."""
        if self._tagger is None:
            factory = self.tagger_factory
            self._tagger = factory() if factory is not None else ConceptTagger(self.engine.data.vocab)
        return self._tagger

    @tagger.setter
    def tagger(self, value: ConceptTagger) -> None:
        self._tagger = value

    def text_concepts(self, text: str) -> tuple[dict[str, float], set[str]]:
        """Concepts inferred in ``text`` with their confidence (all of them count as inferred)."""
        links = self.tagger.infer([text])[0]
        return {link.concept: link.confidence for link in links}, {link.concept for link in links}

    def similar_to_text(self, text: str, k: int = 10, allowed: set[str] | None = None, lang: str = "en") -> list[SearchResult]:
        text = check_query(text, MAX_SIMILAR_TEXT_CHARS, name="text")
        concepts, inferred = self.text_concepts(text)
        query = self.similarity.text_query(text, concepts, inferred)
        return [self._similar_result(e, lang) for e in self.similarity.rank(query, k, allowed)]

    def similar_to_incident(self, incident_id: str, k: int = 10, allowed: set[str] | None = None, lang: str = "en") -> list[SearchResult]:
        query = self.similarity.incident_query(self.engine.data.incidents[incident_id])
        return [self._similar_result(e, lang) for e in self.similarity.rank(query, k, allowed)]

    def _similar_result(self, evidence: Evidence, lang: str) -> SearchResult:
        incident = self.engine.data.incidents[evidence.incident_id]
        chunk = self.engine.chunks[evidence.chunk]
        shared = []
        for concept_id, inferred in sorted(evidence.shared.items(), key=lambda kv: (kv[1], kv[0])):
            ref = self.knowledge.concept_ref(concept_id, lang)
            shared.append(ref.model_copy(update={"inferred": inferred}))
        for concept_id, inferred in evidence.broader.items():
            ref = self.knowledge.concept_ref(concept_id, lang)
            shared.append(ref.model_copy(update={"inferred": inferred, "broader": True}))
        in_lang = chunk.kind != "concepts" and chunk.lang in (lang, RAW_LANG)  # else the title and summary in lang
        shown = chunk.text if in_lang else self.engine.chunks[self._title_chunk(incident.id, lang)].text
        # the words of the passage shown and of the title and summary, not the whole record: this runs per result
        terms = as_written(evidence.terms, chunk.text, shown, incident.title.get(lang), incident.summary.get(lang))
        raw = {"dense": round(evidence.dense, 4)}
        if evidence.lexical is not None:
            raw["lexical"] = round(evidence.lexical, 4)
        if evidence.graph is not None:
            raw["graph"] = round(evidence.graph, 4)
        if evidence.cause is not None:
            raw["cause"] = round(evidence.cause, 4)
        return SearchResult(
            id=incident.id, score=round(evidence.score, 6), title=incident.title.get(lang), org=incident.org, date=incident.date,
            snippet=snippet(shown, terms), status=incident.status.value,
            why=Why(
                chunk=MatchedChunk(id=chunk.id, kind=chunk.kind, lang=chunk.lang, text=chunk.text),
                matched_terms=terms, shared_concepts=shared,
                lexical_rank=evidence.ranks.get("lexical"), dense_rank=evidence.ranks.get("dense"),
                graph_score=None if evidence.graph is None else round(evidence.graph, 4), evidence=raw,
                neighbours=evidence.neighbours,
            ),
        )

    # ---- helpers ---------------------------------------------------------------
    def _concepts(self, incident_id: str) -> list[str]:
        incident: Incident = self.engine.data.incidents[incident_id]
        return [*incident.components, *incident.causes, *incident.symptoms]

    def _kind(self, concept_id: str) -> str:
        concept = self.engine.data.vocab.get(concept_id)
        return concept.kind.value if concept else ""

    def _title_chunk(self, incident_id: str, lang: str = "en") -> int:
        return self.engine.title_chunk(incident_id, lang)

    def _result(self, hit: Hit, query: str, mentions: list[Mention], lang: str, score: float | None = None,
                graph_score: float | None = None) -> SearchResult:
        incident = self.engine.data.incidents[hit.incident_id]
        chunk = self.engine.chunks[hit.chunk]
        terms = as_written(self.engine.lexical.matched_terms(query, hit.chunk), query, chunk.text)
        own = set(self._concepts(incident.id)) | {incident.org}
        shared = [self.knowledge.concept_ref(m.concept_id, lang) for m in mentions if m.concept_id in own]
        # a vocabulary match explains *why*, but a list of labels reads badly, and text follows lang: a match in a
        # list of labels or in the other language shows the record's best passage in lang (as a RAG passage)
        passage = self.passage(incident.id, hit.chunk, query, lang)
        shown = passage.text if passage is not None else self.engine.chunks[self._title_chunk(incident.id, lang)].text
        return SearchResult(
            id=incident.id,
            score=round(float(hit.score if score is None else score), 6),
            title=incident.title.get(lang),
            org=incident.org,
            date=incident.date,
            snippet=snippet(shown, terms),
            status=incident.status.value,
            why=Why(
                chunk=MatchedChunk(id=chunk.id, kind=chunk.kind, lang=chunk.lang, text=chunk.text),
                matched_terms=terms,
                shared_concepts=shared,
                lexical_rank=hit.lexical_rank,
                dense_rank=hit.dense_rank,
                graph_score=None if graph_score is None else round(graph_score, 4),
            ),
        )


_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def as_written(terms: list[str], *texts: str) -> list[str]:
    """Matched terms as the texts write them.  The tokenizer's one English rule drops a plural ``s`` ("timeouts" →
    "timeout"), which also cuts names ("postgres" → "postgre", "kubernetes" → "kubernete"); a term shown to a
    reader is the word of ``texts`` it came from when that word, not the term, is there."""
    words = {word.lower() for text in texts for word in _LATIN_WORD.findall(text)}
    return [f"{term}s" if term not in words and f"{term}s" in words else term for term in terms]


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

