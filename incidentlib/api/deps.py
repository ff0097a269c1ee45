"""Request dependencies: the library, the response language, the shared filter parameters.

The filter parameters are derived from :data:`incidentlib.requests.FILTER_PARAMS`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import AuthError
from ..library import Library
from ..requests import FilterParam, IncidentFilter, with_filter_params


def get_library(request: Request) -> Library:
    """The one library the app serves, with every change committed by any process applied (one cheap check)."""
    library: Library = request.app.state.library
    library.refresh()
    return library


#: Declares the bearer scheme in OpenAPI; a missing header is ours to report (401 with a clear message).
bearer = HTTPBearer(auto_error=False, description="An API token from `incidentlib token create` (il_...).")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    """The bearer token, or None when no ``Authorization`` header was sent at all.

    A header in another scheme (``Basic ...``) or without a token is refused, not read as anonymous.
    """
    if credentials is not None:
        return credentials.credentials
    if request.headers.get("authorization") is not None:
        raise AuthError("Authorization: expected 'Bearer <token>' with a token from `incidentlib token create`")
    return None


#: Routes that answer without any token whatever the settings: liveness probes of a load balancer.
OPEN_PATHS = frozenset({"/health"})


def read_access(request: Request, credentials: Credentials) -> None:
    """Reads are open unless the service runs with ``--require-auth``; then any valid token may read.

    A token that is sent is always checked, even where none is needed: an unknown, revoked or expired
    token is answered 401 rather than silently treated as anonymous, so a client learns its token is bad.
    """
    if request.url.path in OPEN_PATHS:
        return
    token = _token(request, credentials)
    if token is not None or request.app.state.settings.require_auth:
        library: Library = request.app.state.library
        library.authorize(token, "reader")


def editor(request: Request, credentials: Credentials) -> str:
    """The editor (or admin) token's name: every write records it as the actor."""
    library: Library = request.app.state.library
    return library.authorize(_token(request, credentials), "editor")


def admin(request: Request, credentials: Credentials) -> str:
    """The admin token's name (token management)."""
    library: Library = request.app.state.library
    return library.authorize(_token(request, credentials), "admin")


#: The ``request.state`` flag :func:`get_lang` sets when the answer's language came from ``Accept-Language``, so that
#: the response says it varies with that header (``Vary``, added by :class:`~.app.VaryOnLanguage`).
NEGOTIATED_LANGUAGE = "language_negotiated"


def get_lang(
    request: Request,
    lang: Annotated[Literal["en", "ko"] | None, Query(description="Language of text fields; default from Accept-Language, then en.")] = None,
    accept_language: Annotated[str | None, Header()] = None,
) -> str:
    """``lang`` if given, else the one of ko/en that ``Accept-Language`` prefers (its quality values, then its order;
    ``q=0`` refuses a language), else en (and then the answer varies with that header, even when it is absent:
    another client's header gets another language)."""
    if lang:
        return lang
    setattr(request.state, NEGOTIATED_LANGUAGE, True)
    return preferred_language(accept_language)


def preferred_language(accept_language: str | None) -> str:
    """ko or en by RFC 9110 §12.5.4: the highest quality wins, ties go to the earlier tag; en when neither is
    acceptable or the header is absent or unreadable."""
    best: tuple[float, int, str] | None = None
    for position, part in enumerate((accept_language or "").split(",")):
        tag, *params = (piece.strip().lower() for piece in part.split(";"))
        language = "ko" if tag.startswith("ko") else "en" if tag.startswith("en") else None
        if language is None:
            continue
        quality = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    quality = float(param[2:])
                except ValueError:
                    quality = 0.0  # an unreadable weight: not a preference
        if quality > 0 and (best is None or quality > best[0]):
            best = (quality, position, language)
    return best[2] if best else "en"


def _query_param(param: FilterParam) -> Any:
    return Annotated[param.type | None, Query(description=param.help, ge=param.ge, le=param.le)]


@with_filter_params(_query_param)
def get_filters(filters: IncidentFilter) -> IncidentFilter:
    """The filter query parameters as one :class:`IncidentFilter`."""
    return filters


#: Paths that ignore query parameters they do not take: a liveness probe or a monitor that adds a cache-busting
#: parameter must not see the service as down, and generic SPARQL clients add the protocol's dataset parameters
#: (``default-graph-uri``) or their own (``format``, ``output``) to every request.
LENIENT_PATHS = frozenset({"/health", "/sparql"})


def _query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route declares, its dependencies' included (the filters, ``lang``)."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare (422, one problem per name, with the ones it takes).

    A misspelt filter (``yaer_from=2020``) or a parameter of another endpoint would otherwise be ignored and the
    answer would look like one to the question asked."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or getattr(route, "path", None) in LENIENT_PATHS:
        return
    known = _query_names(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise RequestValidationError([
            {"type": "extra_forbidden", "loc": ("query", name), "input": request.query_params.get(name),
             "msg": f"unknown query parameter {name!r}; {request.method} {request.url.path} takes: {takes}"}
            for name in unknown
        ])


LibraryDep = Annotated[Library, Depends(get_library)]
LangDep = Annotated[str, Depends(get_lang)]
FiltersDep = Annotated[IncidentFilter, Depends(get_filters)]
EditorDep = Annotated[str, Depends(editor)]
AdminDep = Annotated[str, Depends(admin)]
