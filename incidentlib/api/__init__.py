"""HTTP API (FastAPI) over the Library facade; see docs/api.md."""

from .app import SERVE_ENV, ServiceSettings, app_from_env, create_app

__all__ = ["SERVE_ENV", "ServiceSettings", "app_from_env", "create_app"]
