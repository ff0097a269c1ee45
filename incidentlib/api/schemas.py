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


class RelatedPage(BaseModel):
    items: list[RelatedItem]


class RagContext(BaseModel):
    query: str
    passages: list[RagPassage]


class ErrorBody(BaseModel):
    detail: str
    id: str | None = None
