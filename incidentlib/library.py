"""The :class:`Library` facade: one object the CLI, the HTTP API and MCP all adapt.

It loads and validates a library directory once, then answers questions about
it. Expensive structures (the RDF graph, the NetworkX projection, the search
indexes) are built on first use.
"""

from __future__ import annotations

import difflib
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from rdflib import Graph

from .errors import NotFound
from .graph.export import ExportFormat, export_graphml, export_jsonl, export_rdf
from .graph.knowledge import KnowledgeGraph
from .graph.rdf import build_graph
from .graph.sparql import SparqlResult, run_sparql
from .loader import LibraryData, Problem, check_library, load_library
from .models import LANGS, ConceptKind, Incident
from .paths import resolve_data_dir
from .search.engine import SearchConfig, SearchEngine, SearchMode
from .search.service import SearchService
from .search.store import BuildReport, ProgressFn
from .views import (
    GraphPath,
    IncidentDetail,
    RagPassage,
    SearchResponse,
    IncidentPage,
    NodeLinkGraph,
    RelatedItem,
    SignalView,
    SourceView,
    TopicPage,
)


class IncidentNotFound(NotFound):
    """No incident with that id."""

    def __init__(self, incident_id: str, suggestions: list[str] | None = None):
        self.incident_id = incident_id
        super().__init__(incident_id, f"no incident with id {incident_id!r}", suggestions)


class FilterError(ValueError):
    """A filter names something the vocabulary does not know."""


class IncidentFilter(BaseModel):
    """Narrow a listing or a search. Concept filters also match narrower concepts."""

    model_config = ConfigDict(extra="forbid")

    org: str | None = None
    component: str | None = None
    cause: str | None = None
    symptom: str | None = None
    tag: str | None = None
    year_from: int | None = Field(default=None, ge=1900, le=2100)
    year_to: int | None = Field(default=None, ge=1900, le=2100)
    severity: str | None = None

    @field_validator("severity")
    @classmethod
    def _severity(cls, value: str | None) -> str | None:
        if value is not None and value not in {"sev1", "sev2", "sev3", "sev4"}:
            raise ValueError("severity must be one of sev1, sev2, sev3, sev4")
        return value

    def is_empty(self) -> bool:
        return all(value is None for value in self.model_dump().values())


_FILTER_FIELDS: dict[str, tuple[ConceptKind, str]] = {
    "org": (ConceptKind.organization, "org"),
    "component": (ConceptKind.component, "components"),
    "cause": (ConceptKind.cause, "causes"),
    "symptom": (ConceptKind.symptom, "symptoms"),
    "tag": (ConceptKind.tag, "tags"),
}


def check_lang(lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    return lang


MAX_K = 100


def check_k(k: int, name: str = "k") -> int:
    if k < 1 or k > MAX_K:
        raise ValueError(f"{name} must be between 1 and {MAX_K}, got {k}")
    return k


class Library:
    """A loaded, validated incident library."""

    def __init__(self, data: LibraryData, search_config: SearchConfig | None = None):
        self.data = data
        self.search_config = search_config or SearchConfig()

    @classmethod
    def open(cls, data_dir: str | Path | None = None, search_config: SearchConfig | None = None) -> Library:
        """Open ``data_dir``, ``$INCIDENTLIB_DATA`` or the bundled library."""
        return cls(load_library(resolve_data_dir(data_dir)), search_config)

    @staticmethod
    def check(data_dir: str | Path | None = None, strict: bool = False) -> tuple[LibraryData | None, list[Problem]]:
        """Validate a library directory and return what loaded plus every problem found.

        The loader's rules always apply (shape, vocabulary references, ids, dates).  With
        ``strict`` the editorial rules of :mod:`incidentlib.strict` apply too: title,
        summary and body in both languages, a non-empty symptom list, an explicit kind
        on every source, Korean particles attached to Latin words and digits, and no
        duplicate records (a shared source URL not acknowledged by a ``related`` link, or
        title+summary+body shingle Jaccard ≥ 0.9 in either language).
        """
        data, problems = check_library(resolve_data_dir(data_dir))
        if strict and data is not None:
            from .strict import check_strict  # the strict rules are only needed here

            problems = [*problems, *check_strict(data)]
        return data, problems

    # ---- basics ----------------------------------------------------------
    @property
    def root(self) -> Path:
        return self.data.root

    @property
    def vocab(self):  # noqa: ANN201 - Vocabulary, kept import-light
        return self.data.vocab

    def __len__(self) -> int:
        return len(self.data.incidents)

    def incidents(self) -> list[Incident]:
        return list(self.data.incidents.values())

    def get(self, incident_id: str) -> Incident:
        key = incident_id.strip().upper()
        try:
            return self.data.incidents[key]
        except KeyError:
            raise IncidentNotFound(incident_id, difflib.get_close_matches(key, list(self.data.incidents), n=3)) from None

    # ---- graph -----------------------------------------------------------
    @cached_property
    def knowledge(self) -> KnowledgeGraph:
        return KnowledgeGraph(self.data)

    @cached_property
    def rdf(self) -> Graph:
        return build_graph(self.data)

    # ---- listing and filters ----------------------------------------------
    def resolve_filter(self, filters: IncidentFilter) -> dict[str, set[str]]:
        """Concept filters as sets of accepted ids (the concept and its narrower ones)."""
        accepted: dict[str, set[str]] = {}
        for name, (kind, field) in _FILTER_FIELDS.items():
            value = getattr(filters, name)
            if value is None:
                continue
            concept = self.vocab.resolve(value, kind)
            if concept is None:
                hint = self.vocab.suggest(value, kind)
                extra = f" (did you mean {', '.join(hint)}?)" if hint else ""
                raise FilterError(f"{name}: unknown {kind.value} {value!r}{extra}")
            accepted[field] = {concept.id, *self.knowledge.descendants(concept.id)}
        return accepted

    def matches(self, incident: Incident, filters: IncidentFilter, accepted: dict[str, set[str]] | None = None) -> bool:
        accepted = self.resolve_filter(filters) if accepted is None else accepted
        for field, ids in accepted.items():
            values = {incident.org} if field == "org" else set(getattr(incident, field))
            if not values & ids:
                return False
        if filters.year_from is not None and (incident.year is None or incident.year < filters.year_from):
            return False
        if filters.year_to is not None and (incident.year is None or incident.year > filters.year_to):
            return False
        if filters.severity is not None and (incident.severity is None or incident.severity.value != filters.severity):
            return False
        return True

    def filter_ids(self, filters: IncidentFilter | None) -> list[str]:
        if filters is None or filters.is_empty():
            return list(self.data.incidents)
        accepted = self.resolve_filter(filters)
        return [i.id for i in self.data.incidents.values() if self.matches(i, filters, accepted)]

    def list_incidents(
        self, filters: IncidentFilter | None = None, lang: str = "en", limit: int | None = None, offset: int = 0
    ) -> IncidentPage:
        check_lang(lang)
        if offset < 0:
            raise ValueError("offset must be >= 0")
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        ids = self.filter_ids(filters)
        window = ids[offset:] if limit is None else ids[offset : offset + limit]
        return IncidentPage(total=len(ids), items=[self.knowledge.summary(self.data.incidents[i], lang) for i in window])

    # ---- one incident --------------------------------------------------------
    def detail(self, incident_id: str, lang: str = "en", related_limit: int = 10) -> IncidentDetail:
        check_lang(lang)
        incident = self.get(incident_id)
        kg = self.knowledge
        body_lang = lang if getattr(incident.body, lang) else incident.body.languages()[0]
        return IncidentDetail(
            id=incident.id,
            lang=lang,
            title=incident.title.get(lang),
            summary=incident.summary.get(lang),
            body=incident.body.get(body_lang).strip(),
            body_lang=body_lang,
            org=kg.concept_ref(incident.org, lang),
            date=incident.date,
            date_kind=incident.date_kind.value,
            status=incident.status.value,
            severity=incident.severity.value if incident.severity else None,
            tags=[kg.concept_ref(c, lang) for c in incident.tags],
            components=[kg.concept_ref(c, lang) for c in incident.components],
            causes=[kg.concept_ref(c, lang) for c in incident.causes],
            symptoms=[kg.concept_ref(c, lang) for c in incident.symptoms],
            signals=[SignalView(text=s.text, note=s.note.get(lang) if s.note else None) for s in incident.signals],
            detection=incident.detection.get(lang) if incident.detection else None,
            mitigation=incident.mitigation.get(lang) if incident.mitigation else None,
            lessons=[lesson.get(lang) for lesson in incident.lessons],
            sources=[
                SourceView(url=str(s.url), title=s.title, publisher=s.publisher, kind=s.kind.value, published=s.published)
                for s in incident.sources
            ],
            related=self.related(incident.id, lang=lang, limit=related_limit),
        )

    def related(self, incident_id: str, lang: str = "en", limit: int | None = 10) -> list[RelatedItem]:
        check_lang(lang)
        return self.knowledge.related(self.get(incident_id).id, lang=lang, limit=limit)

    # ---- concepts and graph walks --------------------------------------------
    def topic(self, concept: str, lang: str = "en") -> TopicPage:
        return self.knowledge.topic(concept, lang=check_lang(lang))

    def neighbors(self, node: str, depth: int = 1, lang: str = "en") -> NodeLinkGraph:
        return self.knowledge.neighbors(node, depth=depth, lang=check_lang(lang))

    def path(self, source: str, target: str, lang: str = "en") -> GraphPath | None:
        return self.knowledge.path(source, target, lang=check_lang(lang))

    def sparql(self, query: str) -> SparqlResult:
        return run_sparql(self.rdf, query)

    def export(self, fmt: ExportFormat | str) -> str:
        fmt = ExportFormat(fmt)
        if fmt is ExportFormat.graphml:
            return export_graphml(self.knowledge.nx)
        if fmt is ExportFormat.jsonl:
            return export_jsonl(self.data)
        return export_rdf(self.rdf, fmt)

    # ---- search ----------------------------------------------------------------
    @cached_property
    def search_engine(self) -> SearchEngine:
        return SearchEngine(self.data, self.search_config)

    @cached_property
    def search_service(self) -> SearchService:
        return SearchService(self.search_engine, self.knowledge)

    def build_index(self, progress: ProgressFn | None = None) -> BuildReport:
        """Build, extend or reuse the persisted dense index for the configured embedder."""
        return self.search_engine.build(progress)

    def _allowed(self, filters: IncidentFilter | None) -> set[str] | None:
        if filters is None or filters.is_empty():
            return None
        return set(self.filter_ids(filters))

    def search(self, query: str, k: int = 10, mode: SearchMode | str = SearchMode.hybrid,
               filters: IncidentFilter | None = None, lang: str = "en") -> SearchResponse:
        """Lexical, dense or hybrid search; filters apply before ranking."""
        check_lang(lang)
        check_k(k)
        mode = SearchMode(mode)
        results = self.search_service.search(query, k=k, mode=mode, allowed=self._allowed(filters), lang=lang)
        return SearchResponse(query=query, mode=mode.value, results=results)

    def similar(self, incident_id: str | None = None, text: str | None = None, k: int = 10,
                filters: IncidentFilter | None = None, lang: str = "en") -> SearchResponse:
        """"Find incidents like this": an incident id or a free text (an error, a log line, a description)."""
        check_lang(lang)
        check_k(k)
        if (incident_id is None) == (text is None):
            raise ValueError("give exactly one of incident_id or text")
        allowed = self._allowed(filters)
        if incident_id is not None:
            incident = self.get(incident_id)
            results = self.search_service.similar_to_incident(incident.id, k=k, allowed=allowed, lang=lang)
            return SearchResponse(query=incident.id, mode="similar", results=results)
        assert text is not None
        results = self.search_service.similar_to_text(text, k=k, allowed=allowed, lang=lang)
        return SearchResponse(query=text, mode="similar", results=results)

    def rag_context(self, query: str, k: int = 5, lang: str = "en", filters: IncidentFilter | None = None) -> list[RagPassage]:
        """Passages ready for a RAG prompt: the best chunk of each hit, in ``lang`` when it exists."""
        response = self.search(query, k=k, filters=filters, lang=lang)
        passages = []
        for result in response.results:
            incident = self.get(result.id)
            chunk = result.why.chunk
            text = chunk.text
            if chunk.lang not in (lang, "raw"):
                # a passage in the reader's language when the library has one: the summary
                text = f"{incident.title.get(lang)}. {incident.summary.get(lang)}"
            passages.append(RagPassage(
                text=text, incident_id=incident.id, title=incident.title.get(lang),
                source_urls=[str(s.url) for s in incident.sources],
                lang=lang if chunk.lang not in (lang, "raw") else chunk.lang, score=result.score,
            ))
        return passages

    # ---- root-cause exploration ---------------------------------------------------
    @cached_property
    def analysis(self):  # noqa: ANN201 - incidentlib.analysis.Analysis (imported lazily: matplotlib, sklearn)
        from .analysis import Analysis

        return Analysis(self)
