"""Incidents, topics, vocabulary and organizations."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from ..graph.knowledge import UnknownNodeError
from ..models import ConceptKind
from ..views import IncidentDetail, IncidentPage, TopicPage
from .deps import MAX_LIMIT, FiltersDep, LangDep, LibraryDep
from .schemas import (
    ErrorBody,
    Health,
    OrganizationList,
    OrganizationSummary,
    RelatedPage,
    TopicList,
    TopicSummary,
    VocabConcept,
    VocabResponse,
)

router = APIRouter()
NOT_FOUND = {404: {"model": ErrorBody, "description": "Unknown id"}}
IncidentId = Annotated[str, Path(description="Incident id such as IL-0025.", max_length=32)]


@router.get("/health", response_model=Health, tags=["service"])
def health(library: LibraryDep) -> Health:
    return Health(incidents=len(library), embedder=library.search_config.embedder.backend)


@router.get("/incidents", response_model=IncidentPage, tags=["incidents"])
def list_incidents(
    library: LibraryDep, lang: LangDep, filters: FiltersDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"At most {MAX_LIMIT}.")] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> IncidentPage:
    """Incidents, newest ids last, filtered by organization, concepts, years and severity."""
    return library.list_incidents(filters, lang=lang, limit=limit, offset=offset)


@router.get("/incidents/{incident_id}", response_model=IncidentDetail, responses=NOT_FOUND, tags=["incidents"])
def get_incident(incident_id: IncidentId, library: LibraryDep, lang: LangDep) -> IncidentDetail:
    return library.detail(incident_id, lang=lang)


@router.get("/incidents/{incident_id}/related", response_model=RelatedPage, responses=NOT_FOUND, tags=["incidents", "graph"])
def related(
    incident_id: IncidentId, library: LibraryDep, lang: LangDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 10,
) -> RelatedPage:
    """Incidents sharing components or causes; rarer shared concepts weigh more (see docs/graph.md)."""
    return RelatedPage(items=library.related(incident_id, lang=lang, limit=limit))


def _incident_counts(library) -> Counter[str]:  # noqa: ANN001
    counts: Counter[str] = Counter()
    for incident in library.incidents():
        for ids in incident.concept_ids().values():
            counts.update(ids)
    return counts


@router.get("/topics", response_model=TopicList, tags=["topics"])
def topics(
    library: LibraryDep, lang: LangDep,
    kind: Annotated[Literal["component", "cause", "symptom", "tag"] | None, Query()] = None,
) -> TopicList:
    """Every component, cause, symptom and tag with its number of incidents."""
    counts = _incident_counts(library)
    kinds = [ConceptKind(kind)] if kind else [ConceptKind.component, ConceptKind.cause, ConceptKind.symptom, ConceptKind.tag]
    items = [
        TopicSummary(id=c.id, kind=c.kind.value, label=c.label.get(lang), incidents=counts[c.id])
        for k in kinds for c in library.vocab.of_kind(k)
    ]
    return TopicList(items=items)


@router.get("/topics/{concept_id}", response_model=TopicPage, responses=NOT_FOUND, tags=["topics"])
def topic(concept_id: Annotated[str, Path(max_length=200)], library: LibraryDep, lang: LangDep) -> TopicPage:
    """A concept's page: definition, incidents, co-occurring concepts, organizations."""
    return library.topic(concept_id, lang=lang)


@router.get("/vocab", response_model=VocabResponse, tags=["topics"])
def vocab(
    library: LibraryDep,
    kind: Annotated[Literal["component", "cause", "symptom", "tag", "organization"] | None, Query()] = None,
) -> VocabResponse:
    """The controlled vocabulary with labels, aliases and definitions in both languages."""
    concepts = [
        VocabConcept(
            id=c.id, kind=c.kind.value,
            labels={"en": c.label.en or "", "ko": c.label.ko or ""},
            alt_labels={"en": c.alt.en, "ko": c.alt.ko},
            broader=c.broader,
            definition={lang: text for lang in ("en", "ko") if c.definition and (text := getattr(c.definition, lang))},
            url=str(c.url) if c.url else None,
        )
        for c in library.vocab
        if kind is None or c.kind.value == kind
    ]
    return VocabResponse(total=len(concepts), concepts=concepts)


@router.get("/organizations", response_model=OrganizationList, tags=["organizations"])
def organizations(library: LibraryDep, lang: LangDep) -> OrganizationList:
    counts = Counter(i.org for i in library.incidents())
    items = [
        OrganizationSummary(id=o.id, label=o.label.get(lang), url=str(o.url) if o.url else None, incidents=counts[o.id])
        for o in library.vocab.of_kind(ConceptKind.organization)
    ]
    items.sort(key=lambda item: (-item.incidents, item.id))
    return OrganizationList(items=items)


@router.get("/organizations/{org_id}", response_model=TopicPage, responses=NOT_FOUND, tags=["organizations"])
def organization(org_id: Annotated[str, Path(max_length=200)], library: LibraryDep, lang: LangDep) -> TopicPage:
    """An organization's page: its incidents and the concepts they involve."""
    concept = library.vocab.get(org_id)
    if concept is None or concept.kind is not ConceptKind.organization:
        raise UnknownNodeError(org_id, library.vocab.suggest(org_id, ConceptKind.organization))
    return library.topic(org_id, lang=lang)
