"""The API's page, ``/docs`` (Swagger UI), whole from this server.

FastAPI's own page loads its script and styles from a public CDN, so on a machine without internet (an air-gapped
cluster, a laptop on a plane) it is blank.  Here the same page takes them from the ``fastapi-offline`` package's
copies, served at :data:`ASSETS_PATH`, with its icon.  ReDoc is not offered: even from a local copy it
fetches its logo from the internet.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"
ICON_PATH = f"{ASSETS_PATH}/favicon.png"
#: Where the package keeps Swagger UI's files.
ASSETS = files("fastapi_offline") / "static"


def install(app: FastAPI) -> None:
    """The page and its assets; the app is made with ``docs_url=None, redoc_url=None`` so FastAPI adds neither of its own."""
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url

    async def swagger_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + openapi_url, title=f"{app.title} - API",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js", swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=root + ICON_PATH, oauth2_redirect_url=root + redirect_url if redirect_url else None,
        )

    async def oauth2_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    app.add_route(DOCS_PATH, swagger_page, include_in_schema=False)
    if redirect_url:
        app.add_route(redirect_url, oauth2_redirect, include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=str(ASSETS)), name="docs-assets")
