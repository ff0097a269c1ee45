"""Request guards for the whole HTTP service, as one ASGI middleware.

In order, for every HTTP request (the MCP endpoint included):

1. ``Host`` must name an allowed host (loopback names, the ``--host`` the
   server listens on, and any ``--allow-host``); otherwise 421.  This stops DNS
   rebinding: a web page whose name resolves to 127.0.0.1 still sends its own
   name as ``Host``.
2. ``Origin``, when sent, must be this server itself (same scheme-less host and
   port as ``Host``) or a configured CORS origin; otherwise 403.  A browser
   sends ``Origin`` on every cross-origin request and on every POST, so a web
   page cannot drive the API through a visitor's browser.  A state-changing
   request marked ``Sec-Fetch-Site: cross-site`` is refused the same way.
3. The body may hold at most ``max_body_bytes``: a larger ``Content-Length`` is
   refused before reading, a larger streamed body as soon as it passes the limit
   (413, a short message that never repeats the input).
4. A JSON body must be strict JSON: no ``NaN``/``Infinity``, no number that
   overflows a double, no unpaired UTF-16 surrogate escape (422).  Python's
   ``json`` accepts all three, and they cannot be written back out in an error
   message.
5. Expensive routes are rate-limited per client address (token bucket: 429 with
   ``Retry-After``).
6. CPU-heavy routes run at most ``heavy_workers`` at a time with at most
   ``heavy_queue`` waiting; beyond that the request is refused at once with 503
   and ``Retry-After`` instead of waiting in an unbounded queue.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..requests import MAX_IMPORT_BYTES, MAX_RECORD_BYTES, MAX_SERIES_BYTES
from .limits import DEFAULT_HEAVY_QUEUE as DEFAULT_HEAVY_QUEUE
from .limits import DEFAULT_HEAVY_WORKERS as DEFAULT_HEAVY_WORKERS
from .limits import DEFAULT_RATE_BURST as DEFAULT_RATE_BURST
from .limits import DEFAULT_RATE_PER_SECOND as DEFAULT_RATE_PER_SECOND
from .limits import MAX_REQUEST_HEAD_BYTES as MAX_REQUEST_HEAD_BYTES
from .schemas import ErrorBody

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Addresses that mean "every interface": not a name a client would send as Host.
WILDCARD_HOSTS = ("0.0.0.0", "::", "")

# The largest legitimate body is a 20,000-character SPARQL query (at most 80 KB in
# UTF-8) or one record (MAX_RECORD_BYTES, the CLI's limit for `add` too); 256 KiB leaves room for forms and MCP
# messages and refuses bulk uploads.
DEFAULT_MAX_BODY_BYTES = MAX_RECORD_BYTES
# Routes whose documented input is larger than the default body limit (with room for JSON framing).
LARGE_BODY_LIMITS = {"/diagnose/series": MAX_SERIES_BYTES + 1024 * 1024, "/import": MAX_IMPORT_BYTES + 1024 * 1024,
                     "/ui/import": MAX_IMPORT_BYTES + 1024 * 1024}
# How long a refused client should wait before retrying, in seconds.
BUSY_RETRY_AFTER_SECONDS = 1
# Forget the bucket of clients idle this long, so the table stays small.
BUCKET_IDLE_SECONDS = 300.0
MAX_BUCKETS = 10_000

RATE_LIMITED_PREFIXES = ("/search", "/similar", "/sparql", "/diagnose", "/rag/context")
HEAVY_PREFIXES = ("/search", "/similar", "/diagnose", "/rag/context", "/clusters", "/map", "/export")
HEAVY_PATTERNS = (re.compile(r"^/incidents/[^/]+/graph\.png$"),)

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

GUARD_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "Origin not allowed (cross-site request)"},
    413: {"model": ErrorBody, "description": "Request body too large"},
    421: {"model": ErrorBody, "description": "Host not allowed"},
    429: {"model": ErrorBody, "description": "Too many requests from this client; see Retry-After"},
    503: {"model": ErrorBody, "description": "Server busy; see Retry-After"},
}


class GuardSettings(BaseModel):
    """Limits and allow-lists for every request; the defaults suit a service on loopback."""

    model_config = ConfigDict(frozen=True)

    allowed_hosts: tuple[str, ...] = Field(default=(), description="Host names accepted besides loopback and the listen host; '*' accepts any.")
    cors_origins: tuple[str, ...] = Field(default=(), description="Origins (scheme://host[:port]) allowed cross-origin; CORS is off when empty.")
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rate_per_second: float = Field(default=DEFAULT_RATE_PER_SECOND, description="0 turns rate limits off.")
    rate_burst: int = DEFAULT_RATE_BURST
    heavy_workers: int = DEFAULT_HEAVY_WORKERS
    heavy_queue: int = DEFAULT_HEAVY_QUEUE


def host_names(listen_host: str, settings: GuardSettings) -> tuple[str, ...]:
    """Loopback names, the listen host unless it is a wildcard, and the configured extra hosts (lower case)."""
    names = [*LOOPBACK_HOSTS]
    if listen_host not in WILDCARD_HOSTS:
        names.append(listen_host)
    names.extend(settings.allowed_hosts)
    return tuple(dict.fromkeys(name.strip().lower().strip("[]") for name in names))


def split_host(value: str) -> str:
    """The host name of a ``Host`` header value: ``[::1]:8000`` → ``::1``, ``a.b:80`` → ``a.b``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def mcp_transport_lists(names: Iterable[str], cors_origins: Iterable[str]) -> tuple[list[str], list[str]]:
    """The same allow-list in the MCP SDK's format: exact values and ``host:*`` port wildcards."""
    hosts: list[str] = []
    origins: list[str] = list(cors_origins)
    for name in names:
        if name == "*":
            continue
        shown = f"[{name}]" if ":" in name else name
        hosts += [shown, f"{shown}:*"]
        origins += [f"{scheme}://{shown}{port}" for scheme in ("http", "https") for port in ("", ":*")]
    return hosts, origins


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimiter:
    """Token bucket per client: ``rate`` tokens a second, at most ``burst`` saved up.

    A request takes one token; with none left it is refused and told to retry
    after ``ceil((1 - tokens) / rate)`` seconds, when the next token arrives.
    """

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, client: str) -> int | None:
        """Take a token for ``client``: ``None`` when allowed, else the seconds to wait."""
        now = self.clock()
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune(now)
            bucket = self._buckets[client] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return max(1, math.ceil((1.0 - bucket.tokens) / self.rate))

    def _prune(self, now: float) -> None:
        idle = [key for key, bucket in self._buckets.items() if now - bucket.stamp > BUCKET_IDLE_SECONDS]
        for key in idle or list(self._buckets)[: MAX_BUCKETS // 2]:
            del self._buckets[key]


class BodyTooLarge(Exception):
    """The streamed body passed the limit."""


class StrictJSONError(ValueError):
    """A JSON body that parses in Python but is not interoperable JSON."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text[:20]} is out of range")
    return value


def _check_strings(node: Any) -> None:
    if isinstance(node, str):
        if _SURROGATE.search(node):
            raise StrictJSONError("string contains an unpaired UTF-16 surrogate escape")
    elif isinstance(node, dict):
        for key, value in node.items():
            _check_strings(key)
            _check_strings(value)
    elif isinstance(node, list):
        for item in node:
            _check_strings(item)


def check_strict_json(body: bytes) -> None:
    """Raise :class:`StrictJSONError` for NaN/Infinity, overflowing numbers or lone surrogates.

    Malformed JSON is left to the route (FastAPI answers it with its usual 422).
    """
    try:
        document = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except StrictJSONError:
        raise
    except UnicodeDecodeError as exc:  # a ValueError too, but about the bytes, not a number
        raise StrictJSONError(f"the body is not UTF-8 (byte {exc.start} of it)") from None
    except ValueError as exc:  # json.JSONDecodeError, or an integer with too many digits
        if isinstance(exc, json.JSONDecodeError):
            return
        raise StrictJSONError("number is too large") from None
    _check_strings(document)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _is_heavy(path: str) -> bool:
    return path.startswith(HEAVY_PREFIXES) or any(pattern.match(path) for pattern in HEAVY_PATTERNS)


async def _reply(send: Send, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}, ensure_ascii=True).encode("ascii")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(key.lower().encode(), value.encode()) for key, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """The checks listed in the module docstring, before the request reaches a route."""

    def __init__(self, app: ASGIApp, listen_host: str, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings
        self.hosts = host_names(listen_host, settings)
        self.any_host = "*" in self.hosts
        self.cors_origins = {origin.rstrip("/").lower() for origin in settings.cors_origins}
        self.limiter = RateLimiter(settings.rate_per_second, settings.rate_burst) if settings.rate_per_second > 0 else None
        self.heavy = anyio.Semaphore(settings.heavy_workers)
        self.waiting = 0

    def _origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.cors_origins:
            return True
        scheme, _, rest = origin.partition("://")
        return scheme in ("http", "https") and rest == host.strip().lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not self.any_host and split_host(host) not in self.hosts:
            await _reply(send, 421, "Host header not allowed; start the server with --allow-host NAME to accept it")
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host):
            await _reply(send, 403, "cross-origin request refused: Origin is not this server nor a configured CORS origin")
            return
        if scope["method"] not in SAFE_METHODS and headers.get("sec-fetch-site") == "cross-site":
            await _reply(send, 403, "cross-site request refused")
            return
        limit = max(self.settings.max_body_bytes, LARGE_BODY_LIMITS.get(scope["path"], 0))
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _reply(send, 413, f"request body larger than {limit} bytes")
            return
        path: str = scope["path"]
        if self.limiter is not None and path.startswith(RATE_LIMITED_PREFIXES):
            client = (scope.get("client") or ("unknown", 0))[0]
            wait = self.limiter.take(client)
            if wait is not None:
                await _reply(send, 429, "too many requests from this client; retry later", {"Retry-After": str(wait)})
                return
        if scope["method"] not in SAFE_METHODS:
            buffered = await self._read_body(receive, limit)
            if buffered is None:
                await _reply(send, 413, f"request body larger than {limit} bytes")
                return
            if buffered and _is_json(headers.get("content-type", "")):
                try:
                    check_strict_json(buffered)
                except StrictJSONError as exc:
                    await _reply(send, 422, [{"loc": ["body"], "msg": f"invalid JSON: {exc}", "type": "json_invalid"}])
                    return
            receive = _replay(buffered, receive)
        if _is_heavy(path):
            await self._run_heavy(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _read_body(self, receive: Receive, limit: int) -> bytes | None:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(parts)

    async def _run_heavy(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.heavy.acquire_nowait()
        except anyio.WouldBlock:
            if self.waiting >= self.settings.heavy_queue:
                await _reply(send, 503, "server busy; retry later", {"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)})
                return
            self.waiting += 1
            try:
                await self.heavy.acquire()
            finally:
                self.waiting -= 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.heavy.release()


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later messages: the client's disconnect

    return replay
