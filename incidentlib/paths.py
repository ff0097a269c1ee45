"""Where the library's data and caches live."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "INCIDENTLIB_DATA"
CACHE_ENV = "INCIDENTLIB_CACHE"

_PACKAGE = Path(__file__).resolve().parent


def bundled_data_dir() -> Path:
    """The curated library shipped with the package.

    In a wheel the top-level ``data/`` folder is installed as ``incidentlib/data``;
    in a source checkout (or an editable install) it is the repository's ``data/``.
    """
    packaged = _PACKAGE / "data"
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / "data"


def resolve_data_dir(explicit: str | Path | None = None) -> Path:
    """``explicit`` if given, else ``$INCIDENTLIB_DATA``, else the bundled library."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    from_env = os.environ.get(DATA_ENV)
    if from_env:
        return Path(from_env).expanduser().resolve()
    return bundled_data_dir()


def default_cache_dir() -> Path:
    """``$INCIDENTLIB_CACHE``, else ``$XDG_CACHE_HOME/incidentlib``, else ``~/.cache/incidentlib``."""
    from_env = os.environ.get(CACHE_ENV)
    if from_env:
        return Path(from_env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "incidentlib").resolve()
