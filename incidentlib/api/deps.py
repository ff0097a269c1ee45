"""Request dependencies: the library, the response language, shared filter parameters."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Header, Query, Request

from ..library import IncidentFilter, Library

MAX_LIMIT = 500
MAX_K = 100
MAX_QUERY_CHARS = 2000


def get_library(request: Request) -> Library:
    return request.app.state.library


def get_lang(
    lang: Annotated[Literal["en", "ko"] | None, Query(description="Language of text fields; default from Accept-Language, then en.")] = None,
    accept_language: Annotated[str | None, Header()] = None,
) -> str:
    if lang:
        return lang
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("ko"):
            return "ko"
        if tag.startswith("en"):
            return "en"
    return "en"


def get_filters(
    org: Annotated[str | None, Query(description="Organization id or name.")] = None,
    component: Annotated[str | None, Query(description="Component id or label; narrower concepts match too.")] = None,
    cause: Annotated[str | None, Query(description="Cause id or label.")] = None,
    symptom: Annotated[str | None, Query(description="Symptom id or label.")] = None,
    tag: Annotated[str | None, Query(description="Tag id or label.")] = None,
    year_from: Annotated[int | None, Query(ge=1900, le=2100)] = None,
    year_to: Annotated[int | None, Query(ge=1900, le=2100)] = None,
    severity: Annotated[Literal["sev1", "sev2", "sev3", "sev4"] | None, Query()] = None,
) -> IncidentFilter:
    return IncidentFilter(org=org, component=component, cause=cause, symptom=symptom, tag=tag,
                          year_from=year_from, year_to=year_to, severity=severity)


LibraryDep = Annotated[Library, Depends(get_library)]
LangDep = Annotated[str, Depends(get_lang)]
FiltersDep = Annotated[IncidentFilter, Depends(get_filters)]
