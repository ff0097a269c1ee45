"""What the OpenAPI document states beyond what FastAPI derives from the routes.

* Security per operation: FastAPI lists the bearer scheme as *required* on every route that
  depends on it. Reads only check a token when one is sent (or the service runs with
  ``--require-auth``), so their requirement is declared optional (``[{}, {"HTTPBearer": []}]``,
  the OpenAPI way of saying "anonymous or bearer"); writes keep it required, and ``/health``
  (load-balancer probes) declares none.
* ``If-Match`` on ``PATCH``: the route answers 428 itself when it is missing (a clearer answer than
  a generic 422), so the parameter is optional to FastAPI but required in the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from .deps import OPEN_PATHS, admin, editor

SCHEME = "HTTPBearer"
#: (method, path) pairs whose If-Match header is mandatory (428 when missing).
IF_MATCH_REQUIRED = frozenset({("patch", "/incidents/{incident_id}")})


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def _token_required(route: APIRoute) -> bool:
    return any(call in (editor, admin) for call in _calls(route.dependant))


def install(app: FastAPI, routers: Sequence[APIRouter], *, require_auth: bool) -> None:
    """Replace ``app.openapi`` with one that post-processes FastAPI's document once.

    ``routers`` are the API routers as declared (the app holds them lazily included, so their
    routes and dependencies are read from the routers themselves; none of them has a prefix).
    """
    derive = app.openapi
    writes = {(method.lower(), route.path) for router in routers for route in router.routes
              if isinstance(route, APIRoute) and _token_required(route) for method in (route.methods or ())}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = derive()
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                if not isinstance(operation, dict) or "responses" not in operation:
                    continue
                if path in OPEN_PATHS:
                    operation["security"] = []
                elif (method, path) in writes or require_auth:
                    operation["security"] = [{SCHEME: []}]
                else:
                    operation["security"] = [{}, {SCHEME: []}]
                if (method, path) in IF_MATCH_REQUIRED:
                    for parameter in operation.get("parameters", []):
                        if parameter.get("in") == "header" and parameter.get("name", "").lower() == "if-match":
                            parameter["required"] = True
                            parameter["schema"] = {"type": "string", "minLength": 1}  # an empty ETag names no version
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema
