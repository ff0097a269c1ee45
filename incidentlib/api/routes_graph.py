"""Graph traversal, SPARQL and exports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import ReadOnlyError
from ..library import MEDIA_TYPES, ExportFormat, Library
from ..requests import MAX_DEPTH, MAX_REF_CHARS, MAX_SPARQL_CHARS
from ..views import GraphPath, NodeLinkGraph
from .deps import LangDep, LibraryDep
from .schemas import ErrorBody
from .sparql_runner import run_with_time_limit

router = APIRouter()
NodeRef = Annotated[str, Path(max_length=MAX_REF_CHARS, description="IL-0025, nccl, component:nccl or a label such as InfiniBand.")]


@router.get("/graph/neighbors/{node}", response_model=NodeLinkGraph, responses={404: {"model": ErrorBody}}, tags=["graph"])
def neighbors(node: NodeRef, library: LibraryDep, lang: LangDep, depth: Annotated[int, Query(ge=1, le=MAX_DEPTH)] = 1) -> NodeLinkGraph:
    """Node-link JSON of everything within ``depth`` hops."""
    return library.neighbors(node, depth=depth, lang=lang)


@router.get("/graph/path", response_model=GraphPath, responses={404: {"model": ErrorBody}}, tags=["graph"])
def path(
    library: LibraryDep, lang: LangDep,
    source: Annotated[str, Query(alias="from", max_length=MAX_REF_CHARS)],
    target: Annotated[str, Query(alias="to", max_length=MAX_REF_CHARS)],
) -> GraphPath:
    """The shortest path between two nodes (tags are skipped, they connect everything)."""
    found = library.path(source, target, lang=lang)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no path between {source!r} and {target!r}")
    return found


SPARQL_JSON = "application/sparql-results+json"
#: Streamed export piece: large enough for few writes, small enough to start sending at once.
EXPORT_CHUNK_BYTES = 64 * 1024
READ_ONLY = "SPARQL UPDATE is not allowed: the library graph is read-only"


SPARQL_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {SPARQL_JSON: {}, "text/turtle": {}}}, 400: {"model": ErrorBody}, 503: {"model": ErrorBody}}


@router.get("/sparql", tags=["graph"], response_class=JSONResponse, responses=SPARQL_RESPONSES)
async def sparql_get(request: Request, library: LibraryDep, query: Annotated[str | None, Query(max_length=MAX_SPARQL_CHARS)] = None) -> Response:
    """SPARQL 1.1 protocol over GET (``?query=``), read-only. See POST /sparql."""
    return await _answer(request, library, query)


@router.post("/sparql", tags=["graph"], response_class=JSONResponse, responses=SPARQL_RESPONSES)
async def sparql_post(request: Request, library: LibraryDep) -> Response:
    """SPARQL 1.1 protocol, read-only: an ``application/sparql-query`` body, or a form with a ``query`` field.

    SELECT and ASK answer ``application/sparql-results+json``; CONSTRUCT and DESCRIBE answer Turtle.
    UPDATE is refused with 400. Each query has a time limit (503 when it is exceeded).
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query: str | None
    if content_type == "application/sparql-query":
        query = (await request.body()).decode("utf-8", errors="replace")
    elif content_type == "application/sparql-update":
        raise ReadOnlyError(READ_ONLY)
    elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        if "update" in form:
            raise ReadOnlyError(READ_ONLY)
        value = form.get("query")
        query = value if isinstance(value, str) else None
    else:
        raise HTTPException(status_code=415, detail="send application/sparql-query, or a form with a 'query' field")
    return await _answer(request, library, query)


async def _answer(request: Request, library: Library, query: str | None) -> Response:
    if not query:
        raise HTTPException(status_code=400, detail="missing SPARQL query")
    if len(query) > MAX_SPARQL_CHARS:
        raise HTTPException(status_code=413, detail=f"SPARQL query longer than {MAX_SPARQL_CHARS:,} characters")
    result = await run_with_time_limit(library, query, request.app.state.settings.sparql_timeout)
    if result.json_results is not None:
        return JSONResponse(result.json_results, media_type=SPARQL_JSON)
    return Response(result.turtle or "", media_type="text/turtle")


@router.get("/export", tags=["graph"], response_class=StreamingResponse,
            responses={200: {"content": {media: {} for media in MEDIA_TYPES.values()}}})
def export(library: LibraryDep, format: Annotated[ExportFormat, Query(description="ttl, jsonld, nt, graphml or jsonl")] = ExportFormat.turtle) -> StreamingResponse:
    """The whole library, streamed."""
    text = library.export(format)

    def chunks() -> Iterator[bytes]:
        view = memoryview(text.encode("utf-8"))
        for start in range(0, len(view), EXPORT_CHUNK_BYTES):
            yield bytes(view[start : start + EXPORT_CHUNK_BYTES])

    filename = f"incidentlib.{format.value}"
    return StreamingResponse(chunks(), media_type=MEDIA_TYPES[format],
                             headers={"Content-Disposition": f'attachment; filename="{filename}"'})
