"""Request dependencies: the library, the response language, the shared filter parameters.

The filter parameters are derived from :data:`incidentlib.requests.FILTER_PARAMS`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Query, Request

from ..library import Library
from ..requests import FilterParam, IncidentFilter, with_filter_params


def get_library(request: Request) -> Library:
    """The one library the app serves."""
    library: Library = request.app.state.library
    return library


def get_lang(
    lang: Annotated[Literal["en", "ko"] | None, Query(description="Language of text fields; default from Accept-Language, then en.")] = None,
    accept_language: Annotated[str | None, Header()] = None,
) -> str:
    """``lang`` if given, else the first of ko/en in ``Accept-Language``, else en."""
    if lang:
        return lang
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("ko"):
            return "ko"
        if tag.startswith("en"):
            return "en"
    return "en"


def _query_param(param: FilterParam) -> Any:
    return Annotated[param.type | None, Query(description=param.help, ge=param.ge, le=param.le)]


@with_filter_params(_query_param)
def get_filters(filters: IncidentFilter) -> IncidentFilter:
    """The filter query parameters as one :class:`IncidentFilter`."""
    return filters


LibraryDep = Annotated[Library, Depends(get_library)]
LangDep = Annotated[str, Depends(get_lang)]
FiltersDep = Annotated[IncidentFilter, Depends(get_filters)]
