"""Incidents, topics, vocabulary and organizations."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from ..requests import MAX_ID_CHARS, MAX_LIMIT, MAX_REF_CHARS, ConceptKindName, TopicKind
from ..views import IncidentDetail, IncidentPage, OrganizationList, TopicList, TopicPage, VocabResponse
from .deps import FiltersDep, LangDep, LibraryDep
from .schemas import ErrorBody, Health, RelatedPage

router = APIRouter()
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorBody, "description": "Unknown id"}}
IncidentId = Annotated[str, Path(description="Incident id such as IL-0025.", max_length=MAX_ID_CHARS)]


@router.get("/health", response_model=Health, tags=["service"])
def health(library: LibraryDep, request: Request) -> Health:
    """``graph_ready`` is false while the graph is built after start (searches are answered; graph requests wait);
    ``tagger_ready`` while the concept tagger is prepared (text similarity and diagnosis wait for it)."""
    runner = getattr(request.app.state, "sparql_runner", None)
    ready = library.graph_ready and (runner is None or runner.ready)
    return Health(incidents=len(library), embedder=library.embedder, graph_ready=ready,
                  tagger_ready=library.tagger_ready)


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


@router.get("/topics", response_model=TopicList, tags=["topics"])
def topics(library: LibraryDep, lang: LangDep, kind: Annotated[TopicKind | None, Query()] = None) -> TopicList:
    """Every component, cause, symptom and tag with its number of incidents."""
    return library.topics(kind, lang=lang)


@router.get("/topics/{concept_id}", response_model=TopicPage, responses=NOT_FOUND, tags=["topics"])
def topic(concept_id: Annotated[str, Path(max_length=MAX_REF_CHARS)], library: LibraryDep, lang: LangDep) -> TopicPage:
    """A concept's page: definition, incidents, co-occurring concepts, organizations."""
    return library.topic(concept_id, lang=lang)


@router.get("/vocab", response_model=VocabResponse, tags=["topics"])
def vocab(library: LibraryDep, kind: Annotated[ConceptKindName | None, Query()] = None) -> VocabResponse:
    """The controlled vocabulary with labels, aliases and definitions in both languages."""
    return library.vocabulary(kind)


@router.get("/organizations", response_model=OrganizationList, tags=["organizations"])
def organizations(library: LibraryDep, lang: LangDep) -> OrganizationList:
    """Every organization with its number of incidents, most first."""
    return library.organizations(lang)


@router.get("/organizations/{org_id}", response_model=TopicPage, responses=NOT_FOUND, tags=["organizations"])
def organization(org_id: Annotated[str, Path(max_length=MAX_REF_CHARS)], library: LibraryDep, lang: LangDep) -> TopicPage:
    """An organization's page: its incidents and the concepts they involve."""
    return library.organization(org_id, lang=lang)
