"""HTTP API (FastAPI) over the Library facade; see docs/api.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import SERVE_ENV, ServiceSettings, app_from_env, create_app

__all__ = ["SERVE_ENV", "ServiceSettings", "app_from_env", "create_app"]


def __getattr__(name: str) -> Any:
    # imported on first use, so the CLI can read the service limits without loading FastAPI
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
