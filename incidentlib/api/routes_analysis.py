"""Clusters, diagnosis, signal explanations and pictures."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..requests import MAX_DIAGNOSE_LIMIT, MAX_ID_CHARS, MAX_QUERY_CHARS, MAX_SYMPTOMS, ClusterMethodName, Lang
from ..views import ClusterSet, ClusterView, Diagnosis, SignalExplanation
from .deps import LangDep, LibraryDep
from .schemas import BODY_ERRORS, ErrorBody

router = APIRouter(tags=["analysis"])
PNG: dict[int | str, dict[str, Any]] = {200: {"content": {"image/png": {}}}}


@router.get("/clusters", response_model=ClusterSet)
def clusters(library: LibraryDep, lang: LangDep, method: Annotated[ClusterMethodName, Query()] = "graph",
             members: Annotated[int | None, Query(ge=0, description="List at most this many members of each cluster "
                                                  "(its size still counts all); every member when absent.")] = None,
             ) -> ClusterSet:
    """Root-cause clusters with bilingual labels, members, a representative and purity/NMI against cause annotations."""
    return library.clusters(method, lang, members)


@router.get("/clusters/{cluster_id}", response_model=ClusterView, responses={404: {"model": ErrorBody}})
def cluster(cluster_id: Annotated[str, Path(max_length=16)], library: LibraryDep, lang: LangDep) -> ClusterView:
    return library.cluster(cluster_id, lang)


class DiagnoseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"text": "MFU drops to 70% every 15 seconds"},
        {"symptoms": ["collective-timeout"], "text": "Watchdog caught collective operation timeout: WorkNCCL(...)"},
    ], "anyOf": [  # symptoms, text, or both (_something), as the schema says it
        {"required": ["symptoms"], "properties": {"symptoms": {"type": "array", "minItems": 1}}},
        {"required": ["text"], "properties": {"text": {"type": "string", "pattern": r"\S"}}},
    ]})

    symptoms: list[str] = Field(default_factory=list, max_length=MAX_SYMPTOMS, description="Symptom ids or labels.")
    text: str | None = Field(default=None, max_length=MAX_QUERY_CHARS, description="Pasted error text or a description.")
    limit: int = Field(default=5, ge=1, le=MAX_DIAGNOSE_LIMIT)
    lang: Lang | None = None

    @model_validator(mode="after")
    def _something(self) -> DiagnoseRequest:
        if not self.symptoms and not (self.text and self.text.strip()):
            raise ValueError("give symptoms, text, or both")
        return self


@router.post("/diagnose", response_model=Diagnosis, responses=BODY_ERRORS)
def diagnose(body: DiagnoseRequest, library: LibraryDep, lang: LangDep) -> Diagnosis:
    """Likely causes and components, with the incidents behind each and a plain statement of confidence."""
    return library.diagnose(symptoms=body.symptoms, text=body.text, lang=body.lang or lang, limit=body.limit)


@router.get("/signals", response_model=list[SignalExplanation])
def signals(library: LibraryDep, lang: LangDep) -> list[SignalExplanation]:
    """Every verbatim error signal in the library, explained."""
    return library.signals(lang)


@router.get("/map", responses={200: {"content": {"image/png": {}, "text/html": {}}}})
def incident_map(library: LibraryDep, lang: LangDep, format: Annotated[Literal["png", "html"], Query()] = "html") -> Response:
    """The 2D incident map: an interactive HTML page (default) or a PNG."""
    if format == "png":
        return Response(library.map_png(lang), media_type="image/png")
    return HTMLResponse(library.map_html(lang))


@router.get("/incidents/{incident_id}/graph.png", responses={**PNG, 404: {"model": ErrorBody}}, tags=["incidents"])
def neighbourhood(incident_id: Annotated[str, Path(max_length=MAX_ID_CHARS)], library: LibraryDep, lang: LangDep) -> Response:
    """A picture of the incident, its concepts and its closest related incidents."""
    return Response(library.neighbourhood_png(incident_id, lang), media_type="image/png")
