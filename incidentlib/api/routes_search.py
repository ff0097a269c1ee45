"""Search, similar incidents and RAG context."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..library import SearchMode
from ..requests import MAX_ID_CHARS, MAX_K, MAX_QUERY_CHARS, MAX_RAG_K, MAX_SIMILAR_TEXT_CHARS, IncidentFilter, Lang
from ..views import SearchResponse
from .deps import FiltersDep, LangDep, LibraryDep
from .schemas import BODY_ERRORS, ErrorBody, RagContext

router = APIRouter(tags=["search"])
QueryText = Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, description="Korean or English text, or a pasted error line.")]
K = Annotated[int, Query(ge=1, le=MAX_K, description=f"Number of results, at most {MAX_K}.")]


@router.get("/search", response_model=SearchResponse, responses={404: {"model": ErrorBody}})
def search(
    q: QueryText, library: LibraryDep, lang: LangDep, filters: FiltersDep,
    k: K = 10,
    mode: Annotated[SearchMode, Query(description="lexical (BM25), dense (vectors) or hybrid.")] = SearchMode.hybrid,
) -> SearchResponse:
    """Filters apply before ranking, so a filtered query still returns k results when k incidents match."""
    return library.search(q, k=k, mode=mode, filters=filters, lang=lang)


class SimilarRequest(BaseModel):
    """Give ``incident_id`` or ``text`` (an error message, a log excerpt, a description)."""

    # strict: JSON has types, so "k": "7" or true is refused (a query string's k=7 is text and is converted)
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"incident_id": "IL-0025", "k": 5},
        {"text": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)", "k": 5},
    ]})

    incident_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    text: str | None = Field(default=None, min_length=1, max_length=MAX_SIMILAR_TEXT_CHARS)
    k: int = Field(default=10, ge=1, le=MAX_K)
    lang: Lang | None = None
    filters: IncidentFilter = Field(default_factory=IncidentFilter)

    @model_validator(mode="after")
    def _one_of(self) -> SimilarRequest:
        if (self.incident_id is None) == (self.text is None):
            raise ValueError("give exactly one of incident_id or text")
        return self


@router.post("/similar", response_model=SearchResponse, responses={404: {"model": ErrorBody}, **BODY_ERRORS})
def similar(body: SimilarRequest, library: LibraryDep, lang: LangDep) -> SearchResponse:
    """"Have we seen this before?": text similarity plus shared components, causes and symptoms."""
    return library.similar(incident_id=body.incident_id, text=body.text, k=body.k, filters=body.filters,
                           lang=body.lang or lang)


@router.get("/rag/context", response_model=RagContext)
def rag_context(q: QueryText, library: LibraryDep, lang: LangDep, filters: FiltersDep, k: Annotated[int, Query(ge=1, le=MAX_RAG_K)] = 5) -> RagContext:
    """Passages ready to paste into a RAG prompt, each with its incident id, title and source URLs."""
    return RagContext(query=q, passages=library.rag_context(q, k=k, lang=lang, filters=filters))
