"""The app's own HTML error page for page addresses the routes never reach: an unknown ``/ui/…`` path (404) and
a parameter the route's declaration refuses (422: an id or a query longer than the library takes). Everywhere
else (the JSON API, the static files) the API's JSON handlers answer as before."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ._i18n import texts
from ._routes import _error, _lang

#: Addresses of the pages: the search page itself and everything under /ui/ but its static files.
PAGE_PREFIX, STATIC_PREFIX = "/ui/", "/ui/static/"
#: Statuses answered with the HTML page; others (405 with its Allow header, …) keep the API's handler.
HTML_STATUSES = (404,)


def _is_page(request: Request) -> bool:
    path = request.url.path
    return request.method in ("GET", "HEAD") and (path in ("/", "/ui") or (path.startswith(PAGE_PREFIX)
                                                                          and not path.startswith(STATIC_PREFIX)))


def _language(request: Request) -> str:
    return _lang(request.query_params.get("lang"), request.headers.get("accept-language"))


def install(app: FastAPI) -> None:
    """Answer page addresses with the HTML error page, delegating every other request to the handlers installed."""
    http_before: Any = app.exception_handlers.get(HTTPException)
    invalid_before: Any = app.exception_handlers.get(RequestValidationError)

    async def http(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException) and exc.status_code in HTML_STATUSES and _is_page(request):
            lang = _language(request)
            return _error(request, lang, exc.status_code, texts(lang)["page_missing"], localized=True)
        answer: Response = await http_before(request, exc)
        return answer

    async def invalid(request: Request, exc: Exception) -> Response:
        if isinstance(exc, RequestValidationError) and _is_page(request):
            reasons = "; ".join(f"{error.get('loc', ('', ''))[-1]}: {error.get('msg', 'invalid value')}"
                                for error in exc.errors())
            return _error(request, _language(request), 422, reasons)
        answer: Response = await invalid_before(request, exc)
        return answer

    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(RequestValidationError, invalid)
