"""HTTP-only response models; the shared ones live in incidentlib.views."""

from __future__ import annotations

from pydantic import BaseModel

from ..views import (  # noqa: F401 - re-exported: shared with the CLI and MCP
    OrganizationList,
    OrganizationSummary,
    RagPassage,
    RelatedItem,
    TopicList,
    TopicSummary,
    VocabConcept,
    VocabResponse,
)


class Health(BaseModel):
    status: str = "ok"
    incidents: int
    embedder: str
    #: False while the graph (NetworkX projection, SPARQL graph) is still built after start: graph requests wait.
    graph_ready: bool = True
    #: False while the concept tagger that pasted text needs (similar, diagnose) is still fitted or loaded after start.
    tagger_ready: bool = True


class RelatedPage(BaseModel):
    items: list[RelatedItem]


class RagContext(BaseModel):
    query: str
    passages: list[RagPassage]


class ErrorBody(BaseModel):
    detail: str
    id: str | None = None


# FastAPI answers 400 for a body it cannot read (invalid UTF-8, a broken multipart).
BODY_ERRORS: dict[int | str, dict[str, object]] = {400: {"model": ErrorBody, "description": "Body could not be read"}}
