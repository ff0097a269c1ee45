"""The FastAPI application: thin routes over one :class:`~incidentlib.library.Library`.

The MCP server (streamable HTTP) is mounted at ``/mcp`` on the same service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..library import Library, built_for_process_lifetime
from ..requests import MAX_K, MAX_LIMIT, MAX_QUERY_CHARS
from . import contract, docs_page, errors
from .deps import NEGOTIATED_LANGUAGE, known_query, read_access
from .guards import GUARD_RESPONSES, GuardMiddleware, GuardSettings, host_names, mcp_transport_lists
from .mcp_mount import LazyMcp
from .routes_analysis import router as analysis_router
from .routes_graph import router as graph_router
from .routes_library import router as library_router
from .routes_search import router as search_router
from .routes_signals import router as signals_router
from .routes_write import router as write_router
from .sparql_runner import DEFAULT_MAX_CONCURRENT, SparqlRunner

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceSettings:
    sparql_timeout: float = 10.0
    mount_mcp: bool = True
    host: str = "127.0.0.1"
    web: bool = True
    sparql_max_concurrent: int = DEFAULT_MAX_CONCURRENT
    guards: GuardSettings = field(default_factory=GuardSettings)
    #: Reads need a token too (writes always do).
    require_auth: bool = False
    #: Apply changes committed by any process in a background thread (see Library.follow_changes).
    follow_changes: bool = True


DESCRIPTION = """
A bilingual (Korean/English) knowledge graph and semantic search over real,
publicly documented infrastructure incidents: GPU/AI training clusters, GPU
clouds, inference services, and the big cloud and internet outages.

Text fields follow `lang=ko|en` (default: `Accept-Language`, then English).
Writes (POST/PATCH/DELETE) need an editor token (`Authorization: Bearer il_...`), token
management an admin token; reads are open unless the service runs with `--require-auth`.
Updates need `If-Match` with the record's `ETag` (412 when stale, 428 when missing).

`k` is capped at {MAX_K}, `limit` at {MAX_LIMIT}, and queries at {MAX_QUERY_CHARS:,} characters.
"""


def create_app(library: Library, settings: ServiceSettings | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    mcp: LazyMcp | None = None
    if settings.mount_mcp:
        # built on the first request to /mcp (api/mcp_mount.py): the SDK's imports are not paid by every start

        def build_mcp() -> tuple[MCPServer, list[BaseRoute]]:
            from mcp.server.transport_security import TransportSecuritySettings

            from ..mcp_server import build_mcp_server

            server = build_mcp_server(library)
            # the SDK checks Host/Origin itself only for loopback --host values; give it our allow-list for any host
            hosts, origins = mcp_transport_lists(host_names(settings.host, settings.guards), settings.guards.cors_origins)
            security = TransportSecuritySettings(enable_dns_rebinding_protection="*" not in settings.guards.allowed_hosts,
                                                 allowed_hosts=hosts, allowed_origins=origins)
            routes = server.streamable_http_app(
                streamable_http_path="/mcp", host=settings.host, transport_security=security,
                max_request_body_size=settings.guards.max_body_bytes,
            ).routes
            return server, routes

        mcp = LazyMcp(build_mcp)

    sparql_runner = SparqlRunner(settings.sparql_max_concurrent)
    first_answer = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sparql_runner.start(library)  # forks the SPARQL graph process now, before any request thread exists
        library.expect_background_tagger()  # requests before it is ready are refused, not left to fit it
        # the server answers searches from here on; graph requests wait for this build (Library.prepare_graph).
        # These threads share the GIL with the requests, so they begin once the first request is answered (or
        # after BACKGROUND_DELAY_SECONDS without one): the first answers do not wait behind them.
        for name, work in (("graph", library.prepare_graph), ("tagger", library.prepare_tagger),
                           ("facets", library.prepare_facets), ("start-snapshot", library.save_start_snapshot),
                           ("similar", library.warm_similar)):
            threading.Thread(target=_after_first_answer, args=(first_answer, work), name=f"incidentlib-{name}",
                             daemon=True).start()
        stop_following = threading.Event()
        if settings.follow_changes:
            threading.Thread(target=library.follow_changes, args=(stop_following,), name="incidentlib-follow",
                             daemon=True).start()
        try:
            if mcp is None:
                yield
                return
            async with mcp.running():
                yield
        finally:
            stop_following.set()
            sparql_runner.stop()
            library.save_pending_indexes()  # a BM25 index updated by writes and not compacted yet

    app = FastAPI(title="incidentlib", version=__version__, description=DESCRIPTION.format(MAX_K=MAX_K, MAX_LIMIT=MAX_LIMIT, MAX_QUERY_CHARS=MAX_QUERY_CHARS), lifespan=lifespan,
                  dependencies=[Depends(read_access)], docs_url=None, redoc_url=None)  # docs_page: no CDN
    app.state.library = library
    app.state.settings = settings
    app.state.sparql_runner = sparql_runner
    errors.install(app)
    docs_page.install(app)
    routers = (library_router, search_router, graph_router, analysis_router, signals_router, write_router)
    for router in routers:
        app.include_router(router, responses=GUARD_RESPONSES, dependencies=[Depends(known_query)])
    contract.install(app, routers, require_auth=settings.require_auth)
    if settings.web:
        from .. import web

        web.install(app)
    if settings.guards.cors_origins:  # CORS stays off (no headers at all) unless origins are configured
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.guards.cors_origins),
                           allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE"],
                           allow_headers=["content-type", "accept-language", "authorization", "if-match"])
    app.add_middleware(GuardMiddleware, listen_host=settings.host, settings=settings.guards)
    app.add_middleware(FirstAnswer, answered=first_answer)
    app.add_middleware(VaryOnLanguage)
    if mcp is not None:
        # one route at exactly /mcp, as the SDK's own (no redirect); the app.state handle lets tests see it is lazy
        app.router.routes.append(Route("/mcp", endpoint=mcp))
        app.state.mcp = mcp
    return app


#: Seconds the background work of a start (projection, tagger, start snapshot) waits for the first request to be
#: answered before it begins anyway: a server nobody asks yet gets its graph ready about this much later.
#: Short against the work itself (seconds at 10k records); measured in docs/benchmarks.md (server start).
BACKGROUND_DELAY_SECONDS = 1.0


def _after_first_answer(first_answer: threading.Event, work: Callable[[], object]) -> None:
    first_answer.wait(BACKGROUND_DELAY_SECONDS)
    try:
        work()
    except Exception:  # a background warm-up must not take the process down; the request that needs it meets it
        logger.exception("background work after start failed: %s", getattr(work, "__name__", work))


class FirstAnswer:
    """ASGI middleware: sets ``answered`` once the first HTTP request has been answered (one check per request
    afterwards)."""

    def __init__(self, app: ASGIApp, answered: threading.Event) -> None:
        self.app = app
        self.answered = answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.answered.is_set() or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.answered.set()


class VaryOnLanguage:
    """ASGI middleware: ``Vary: Accept-Language`` on every response whose language came from that header (the route's
    ``lang`` dependency says so, :data:`~.deps.NEGOTIATED_LANGUAGE`), so that a shared cache or CDN does not hand one
    client's Korean answer to another who asked in English.  A request with ``lang=`` gets none: its URL decides."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_varied(message: Message) -> None:
            if message["type"] == "http.response.start" and scope.get("state", {}).get(NEGOTIATED_LANGUAGE):
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"vary"]
                varies = [part.strip() for k, v in message.get("headers", []) if k.lower() == b"vary"
                          for part in v.decode("latin-1").split(",") if part.strip()]
                if not any(part.lower() in ("accept-language", "*") for part in varies):
                    varies.append("Accept-Language")
                message = {**message, "headers": [*headers, (b"vary", ", ".join(varies).encode("latin-1"))]}
            await send(message)

        await self.app(scope, receive, send_varied)


#: Environment variable through which `serve --workers N` hands its settings to each worker process.
SERVE_ENV = "INCIDENTLIB_SERVE"


def app_from_env() -> FastAPI:
    """The app of one `serve --workers N` worker: settings from ``$INCIDENTLIB_SERVE`` (JSON)."""
    import json
    import os
    from pathlib import Path

    config = json.loads(os.environ[SERVE_ENV])
    cache = config.pop("cache")
    with built_for_process_lifetime():  # the worker's library lives as long as the worker (incidentlib.gc_pause)
        library = Library.open(config.pop("data"), embedder=config.pop("embedder"), cache_dir=Path(cache) if cache else None,
                               graph_store=config.pop("graph_store", None), search_backend=config.pop("search_backend", None))
        library.warm_search(save_snapshot=False)  # the graph and the start snapshot follow once the worker listens
    guards = GuardSettings.model_validate(config.pop("guards", {}))
    return create_app(library, ServiceSettings(**config, guards=guards))
