"""The web app for people: server-rendered pages over the :class:`~incidentlib.library.Library`.

Search as you type, "have we seen this?", incident pages with the related list and an
interactive neighbourhood graph, topic pages with a timeline, clusters with a map, the
review queue and the import page. Templates are Jinja2; the little JavaScript there is (``static/app.js``) only
enhances pages that work without it.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from . import _errors
from ._import import router as import_router
from ._review import router as review_router
from ._routes import router

STATIC_DIR = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Serve the pages at ``/`` and ``/ui/…`` and their assets at ``/ui/static``."""
    app.include_router(router)
    app.include_router(review_router)
    app.include_router(import_router)
    app.mount("/ui/static", StaticFiles(directory=str(STATIC_DIR)), name="ui-static")
    _errors.install(app)  # after the API's handlers, which it keeps for everything but the pages


__all__ = ["install"]
