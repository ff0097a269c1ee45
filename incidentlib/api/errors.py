"""Domain errors -> JSON error responses with a clear message."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ..analysis import UnknownClusterError
from ..graph.knowledge import UnknownNodeError
from ..graph.sparql import SparqlError
from ..library import FilterError, IncidentNotFound
from ..search.service import QueryError


def install(app: FastAPI) -> None:
    @app.exception_handler(IncidentNotFound)
    async def _incident(_: Request, exc: IncidentNotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc), "id": exc.incident_id})

    @app.exception_handler(UnknownNodeError)
    async def _node(_: Request, exc: UnknownNodeError) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc), "id": exc.reference})

    @app.exception_handler(UnknownClusterError)
    async def _cluster(_: Request, exc: UnknownClusterError) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc), "id": exc.cluster_id})

    @app.exception_handler(FilterError)
    async def _filter(_: Request, exc: FilterError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(QueryError)
    async def _query(_: Request, exc: QueryError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    @app.exception_handler(SparqlError)
    async def _sparql(_: Request, exc: SparqlError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})
