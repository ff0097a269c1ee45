"""The error hierarchy -> JSON error responses with a clear message, in one table.

Every 422 has the documented validation shape, ``{"detail": [{"loc", "msg", "type"}]}``,
whether pydantic or the library found the problem.  Validation errors never echo
the input back (it may be large, or not representable in JSON: lone surrogates,
non-finite numbers), and every message is made JSON-safe before it is written.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from ..errors import (
    AuthError,
    Busy,
    Forbidden,
    GraphStoreError,
    ImportFailed,
    IncidentlibError,
    InvalidRequest,
    MappingError,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    ReadError,
    SearchBackendError,
    SparqlError,
    SparqlTimeout,
    StateConflict,
    ValidationFailed,
    WriteError,
)
from ..requests import CrossFieldError, IncidentFilter

#: Most specific class first: the first match decides the status.
STATUS: tuple[tuple[type[IncidentlibError], int], ...] = (
    (NotFound, 404),
    (Forbidden, 403),
    (AuthError, 401),
    (PreconditionFailed, 412),
    (PreconditionRequired, 428),
    (StateConflict, 409),
    (WriteError, 409),
    (SparqlError, 400),
    (InvalidRequest, 422),
    # an uploaded collection (POST /import) that cannot be read or mapped is the request's fault
    (ReadError, 422),
    (MappingError, 422),
    (ImportFailed, 422),
    (SparqlTimeout, 503),
    (Busy, 503),  # SPARQL slots taken, or the graph or the tagger still prepared after start
    (GraphStoreError, 503),  # the shared store is down or unreachable: the replica is fine, retry
    (SearchBackendError, 503),  # the shared search engine is down or unreachable: likewise
)
#: Anything else the package raises on purpose is a server-side condition (e.g. no embedder).
DEFAULT_STATUS = 500
#: Seconds a client is told to wait after a SPARQL time-out: about one time-limited query.
TIMEOUT_RETRY_AFTER_SECONDS = 5

HTTP_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE"})
_SURROGATE = re.compile("[\ud800-\udfff]")


def status_for(exc: IncidentlibError) -> int:
    """The HTTP status of a package error: the first row of ``STATUS`` it is an instance of."""
    return next((status for cls, status in STATUS if isinstance(exc, cls)), DEFAULT_STATUS)


def json_safe(value: Any) -> Any:
    """``value`` with lone surrogates replaced (U+FFFD) and non-finite floats as strings, so it always encodes."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(json_safe(key)): json_safe(item) for key, item in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    return json_safe(str(value))


#: Where in a POST /import body each import error points.
IMPORT_FIELD: tuple[tuple[type[IncidentlibError], tuple[str, ...]], ...] = (
    (ReadError, ("body", "content")), (MappingError, ("body", "maps")), (ImportFailed, ("body",)))


#: Library arguments that a route's query string spells otherwise (``GET /search?q=`` is ``Library.search(query)``).
QUERY_NAMES = {"query": "q"}
#: Methods whose parameters a route reads from a JSON body.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

Loc = list[str | int]


def _body_model(request: Request) -> type[BaseModel] | None:
    """The pydantic model of the matched route's JSON body, if it has one (None for a free JSON object)."""
    body = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(body, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _body_location(request: Request, parameter: str | None, path: tuple[str | int, ...]) -> Loc:
    if parameter is None:
        return ["body"]
    model = _body_model(request)
    if model is not None and parameter not in model.model_fields and "filters" in model.model_fields \
            and parameter in IncidentFilter.model_fields:
        return ["body", "filters", parameter, *path]  # POST /similar's filters are one object of the body
    return ["body", parameter, *path]


def _locations(request: Request, exc: IncidentlibError) -> list[Loc]:
    """Where in the request each problem of ``exc`` is: ``["query", "q"]``, ``["body", "filters", "cause"]``,
    ``["body", "symptoms", 0]``; the library names its own arguments, and the route's method and body model say
    where the request carried them."""
    if not isinstance(exc, InvalidRequest):
        return [next((list(loc) for cls, loc in IMPORT_FIELD if isinstance(exc, cls)), ["body"])]
    parameters = [exc.parameter, *exc.others]
    json_body = _body_model(request) is not None or request.headers.get("content-type", "").startswith("application/json")
    if request.method in BODY_METHODS and json_body:
        return [_body_location(request, name, exc.path if name == exc.parameter else ()) for name in parameters]
    # a problem that names no parameter is about the record the path names (a draft refused by the published rules)
    unnamed: Loc = ["path", "incident_id"] if "incident_id" in request.path_params else ["query"]
    return [["query", QUERY_NAMES.get(name, name)] if name else unnamed for name in parameters]


def _error_locations(error: Mapping[str, Any]) -> list[Loc]:
    """Where a validation error is: a rule across fields (:class:`~incidentlib.requests.CrossFieldError`) is about each
    of its fields, as the query-string form says (``year_from`` after ``year_to``: both, in a body as in a query)."""
    loc = list(error.get("loc", ()))
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, CrossFieldError):
        return [[*loc, field] for field in cause.fields]
    return [loc]


def allowed_methods(request: Request) -> list[str]:
    """Every method the OpenAPI document declares for the request's path (HEAD with GET).

    Starlette's own 405 names only the first route that matched the path; a path served by two
    routers (``GET /incidents`` for reading, ``POST /incidents`` for writing) needs their union,
    and the contract is the one list both agree on.
    """
    path = request.url.path
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = "^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            methods.update(method.upper() for method in operations if method.upper() in HTTP_METHODS)
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Register one handler for the whole hierarchy, and a JSON-safe one for validation errors."""

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405:
            allowed = allowed_methods(request)
            if allowed:
                exc = HTTPException(405, exc.detail, headers={**(exc.headers or {}), "Allow": ", ".join(allowed)})
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [
            # a validator's own message, without the "Value error, " pydantic puts before it
            {"loc": loc, "msg": str(error.get("msg", "invalid value")).removeprefix("Value error, "),
             "type": error.get("type", "value_error")}
            for error in exc.errors() for loc in _error_locations(error)
        ]
        return JSONResponse(status_code=422, content={"detail": json_safe(detail)})

    @app.exception_handler(IncidentlibError)
    async def _handle(request: Request, exc: IncidentlibError) -> JSONResponse:
        status = status_for(exc)
        content: dict[str, Any] = {"detail": str(exc)}
        headers: dict[str, str] = {}
        if isinstance(exc, NotFound):
            content["id"] = exc.key
        elif status == 422:  # the documented validation array
            content["detail"] = [{"loc": loc, "msg": str(exc), "type": "value_error"} for loc in _locations(request, exc)]
        if isinstance(exc, ValidationFailed):
            content["problems"] = [p.model_dump() for p in exc.problems]
        if isinstance(exc, Busy):
            headers["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, SparqlTimeout):
            headers["Retry-After"] = str(TIMEOUT_RETRY_AFTER_SECONDS)
        elif isinstance(exc, AuthError) and not isinstance(exc, Forbidden):
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(status_code=status, content=json_safe(content), headers=headers)
