"""Domain errors -> JSON error responses with a clear message."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ..errors import NotFound
from ..graph.sparql import SparqlError
from ..library import FilterError
from ..search.service import QueryError


def install(app: FastAPI) -> None:
    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc), "id": exc.key})

    @app.exception_handler(FilterError)
    async def _filter(_: Request, exc: FilterError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(QueryError)
    async def _query(_: Request, exc: QueryError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(SparqlError)
    async def _sparql(_: Request, exc: SparqlError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})
