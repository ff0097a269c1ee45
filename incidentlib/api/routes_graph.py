"""Graph traversal, SPARQL and exports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import ReadOnlyError
from ..library import MEDIA_TYPES, ExportFormat, Library
from ..requests import MAX_DEPTH, MAX_REF_CHARS, MAX_SPARQL_CHARS
from ..views import GraphPath, NodeLinkGraph
from .deps import LangDep, LibraryDep
from .schemas import ErrorBody
from .sparql_runner import SparqlRunner

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


SPARQL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {SPARQL_JSON: {}, "text/turtle": {}}},
    400: {"model": ErrorBody, "description": "Missing query (the SPARQL protocol's answer), syntax error, UPDATE, SERVICE or FROM"},
    413: {"model": ErrorBody, "description": "Request body too large"},
    422: {"description": f"Query longer than {MAX_SPARQL_CHARS:,} characters, by GET or POST",
          # FastAPI's own validation array, which every other route's 422 declares
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}}},
    503: {"model": ErrorBody, "description": "Time limit exceeded, or too many queries running; see Retry-After"},
}
#: GET's ``query`` as the OpenAPI document states it: required, as the SPARQL protocol has it.  The route reads it as
#: optional, so that a request without one gets the protocol's 400 "missing SPARQL query" rather than a 422.
SPARQL_GET_QUERY: dict[str, Any] = {"parameters": [{
    "name": "query", "in": "query", "required": True, "description": "The SPARQL query (SELECT, ASK, CONSTRUCT or DESCRIBE).",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_SPARQL_CHARS}}]}
SPARQL_POST_RESPONSES: dict[int | str, dict[str, Any]] = {**SPARQL_RESPONSES, 415: {"model": ErrorBody, "description": "Unsupported Content-Type"}}
SPARQL_METHODS = "GET, POST, OPTIONS"
# The body is read by hand (two media types), so it is described here for the OpenAPI document.
SPARQL_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/sparql-query": {"schema": {"type": "string", "minLength": 1, "maxLength": MAX_SPARQL_CHARS},
                                 "example": "SELECT ?s WHERE { ?s a il:Incident } LIMIT 5"},
    "application/x-www-form-urlencoded": {"schema": {"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": MAX_SPARQL_CHARS}}}},
}}}


@router.get("/sparql", tags=["graph"], response_class=JSONResponse, responses=SPARQL_RESPONSES, openapi_extra=SPARQL_GET_QUERY)
async def sparql_get(request: Request, library: LibraryDep, query: Annotated[str | None, Query(include_in_schema=False)] = None) -> Response:
    """SPARQL 1.1 protocol over GET (``?query=``), read-only. See POST /sparql."""
    return await _answer(request, library, query, ("query", "query"))


@router.options("/sparql", include_in_schema=False)
async def sparql_options() -> Response:
    """The SPARQL endpoint answers GET and POST (one route each, so the router alone would list only GET)."""
    return Response(status_code=204, headers={"Allow": SPARQL_METHODS})


@router.post("/sparql", tags=["graph"], response_class=JSONResponse, responses=SPARQL_POST_RESPONSES, openapi_extra=SPARQL_BODY)
async def sparql_post(request: Request, library: LibraryDep) -> Response:
    """SPARQL 1.1 protocol, read-only: an ``application/sparql-query`` body, or a form with a ``query`` field.

    SELECT and ASK answer ``application/sparql-results+json``; CONSTRUCT and DESCRIBE answer Turtle.
    UPDATE is refused with 400. Each query has a time limit (503 when it is exceeded).
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query: str | None
    where: tuple[str, ...] = ("body", "query")
    if content_type == "application/sparql-query":
        query = (await request.body()).decode("utf-8", errors="replace")
        where = ("body",)
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
    return await _answer(request, library, query, where)


async def _answer(request: Request, library: Library, query: str | None, where: tuple[str, ...]) -> Response:
    """``where``: the query's place in the request, for the 422 of an over-long one (the same by GET and POST)."""
    if not query:
        raise HTTPException(status_code=400, detail="missing SPARQL query")
    if len(query) > MAX_SPARQL_CHARS:
        raise RequestValidationError([{"loc": where, "type": "string_too_long",
                                       "msg": f"SPARQL query is {len(query):,} characters; the limit is {MAX_SPARQL_CHARS:,}"}])
    runner: SparqlRunner = request.app.state.sparql_runner
    result = await runner.run(library, query, request.app.state.settings.sparql_timeout)
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
