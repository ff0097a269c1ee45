"""HTTP-only response models; the shared ones live in incidentlib.views."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..views import RagPassage, RelatedItem


class Health(BaseModel):
    status: str = "ok"
    incidents: int
    embedder: str


class RelatedPage(BaseModel):
    items: list[RelatedItem]


class TopicSummary(BaseModel):
    id: str
    kind: str
    label: str
    incidents: int


class TopicList(BaseModel):
    items: list[TopicSummary]


class VocabConcept(BaseModel):
    id: str
    kind: str
    labels: dict[str, str]
    alt_labels: dict[str, list[str]]
    broader: str | None = None
    definition: dict[str, str] = Field(default_factory=dict)
    url: str | None = None


class VocabResponse(BaseModel):
    total: int
    concepts: list[VocabConcept]


class OrganizationSummary(BaseModel):
    id: str
    label: str
    url: str | None = None
    incidents: int


class OrganizationList(BaseModel):
    items: list[OrganizationSummary]


class RagContext(BaseModel):
    query: str
    passages: list[RagPassage]


class ErrorBody(BaseModel):
    detail: str
    id: str | None = None
