"""HTTP API (FastAPI) over the Library facade; see docs/api.md."""

from .app import ServiceSettings, create_app

__all__ = ["ServiceSettings", "create_app"]
