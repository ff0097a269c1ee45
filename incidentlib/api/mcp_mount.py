"""The MCP endpoint at ``/mcp``, built on its first request instead of when the app is created.

Importing the MCP SDK and building the server costs about half a second to a second of every start
(docs/benchmarks.md, server start), paid before the server listens although most starts never see an MCP
client.  :class:`LazyMcp` is mounted at exactly ``/mcp`` (the path the SDK's own route has, so no redirect)
and, on the first request there, imports and builds the server in a worker thread (the event loop keeps
answering other requests), starts its session manager in a task of the app's lifespan (the SDK needs it
running for as long as the app serves), then hands this and every later request to the SDK's own route.
The SDK's route, settings, transport security and body limit are the ones ``create_app`` used to build at
once: only the moment changes.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send

from ..errors import IncidentlibError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)


class McpUnavailableError(IncidentlibError):
    """The MCP endpoint could not be built (the SDK is missing, or building the server failed)."""


class LazyMcp:
    """An ASGI app for ``/mcp``: ``build()`` (the server and its routes) runs on the first request."""

    def __init__(self, build: Callable[[], tuple[MCPServer, list[BaseRoute]]]) -> None:
        # a missing SDK is an error at start, as it was when the server was built there
        if importlib.util.find_spec("mcp") is None:
            raise McpUnavailableError("the MCP endpoint (/mcp) needs the 'mcp' package; install it or serve with --no-mcp")
        self._build = build
        self._routes: list[BaseRoute] | None = None
        self._error: BaseException | None = None
        self._wanted: anyio.Event | None = None
        self._ready: anyio.Event | None = None
        self._stopping = False
        self._stop: anyio.Event | None = None

    @property
    def built(self) -> bool:
        """True once the first request built the server."""
        return self._routes is not None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The app's lifespan holds this: the task that builds the server on demand and keeps its session manager
        running until the app stops."""
        self._wanted, self._ready, self._stopping = anyio.Event(), anyio.Event(), False
        async with anyio.create_task_group() as group:
            group.start_soon(self._serve)
            try:
                yield
            finally:
                self._stopping = True
                self._wanted.set()  # a never-used endpoint: the task wakes and ends without building
                if self._stop is not None:
                    self._stop.set()

    async def _serve(self) -> None:
        assert self._wanted is not None and self._ready is not None
        await self._wanted.wait()
        if self._stopping:
            return
        try:
            server, routes = await anyio.to_thread.run_sync(self._build)
        except Exception as exc:  # the request that asked meets the error; the app keeps serving the rest
            log.exception("the MCP endpoint could not be built")
            self._error = exc
            self._ready.set()
            return
        self._stop = anyio.Event()
        async with server.session_manager.run():
            self._routes = routes
            self._ready.set()
            await self._stop.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._routes is None:
            if self._wanted is None or self._ready is None:
                raise McpUnavailableError("the MCP endpoint (/mcp) is served only while the app's lifespan runs")
            self._wanted.set()
            await self._ready.wait()
            if self._error is not None:
                raise McpUnavailableError(f"the MCP endpoint (/mcp) could not be built: {self._error}") from self._error
        assert self._routes is not None
        for route in self._routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                scope.update(child)
                await route.handle(scope, receive, send)
                return
        raise McpUnavailableError(f"no MCP route for {scope.get('path')!r}")  # the SDK's route is /mcp: not reached
