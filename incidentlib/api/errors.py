"""The error hierarchy -> JSON error responses with a clear message, in one table."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ..errors import (
    AuthError,
    Forbidden,
    IncidentlibError,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    SparqlError,
    SparqlTimeout,
    StateConflict,
    ValidationFailed,
    WriteError,
)

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
    (SparqlTimeout, 503),
)
#: Anything else the package raises on purpose is a server-side condition (e.g. no embedder).
DEFAULT_STATUS = 500


def status_for(exc: IncidentlibError) -> int:
    """The HTTP status of a package error: the first row of ``STATUS`` it is an instance of."""
    return next((status for cls, status in STATUS if isinstance(exc, cls)), DEFAULT_STATUS)


def install(app: FastAPI) -> None:
    """Register one handler for the whole hierarchy."""

    @app.exception_handler(IncidentlibError)
    async def _handle(_: Request, exc: IncidentlibError) -> JSONResponse:
        content: dict[str, object] = {"detail": str(exc)}
        if isinstance(exc, NotFound):
            content["id"] = exc.key
        if isinstance(exc, ValidationFailed):
            content["problems"] = [p.model_dump() for p in exc.problems]
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, AuthError) and not isinstance(exc, Forbidden) else None
        return JSONResponse(status_code=status_for(exc), content=content, headers=headers)
