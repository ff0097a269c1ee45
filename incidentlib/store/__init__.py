"""The writable overlay: drafts, edits, deletions, history and API tokens in one SQLite file.

The YAML library under ``incidents/`` and ``vocab/`` is the read-only base layer; every write
from the service lands in ``<library>/.incidentlib.db`` (see docs/storage.md for why).
"""

from .auth import ROLES, Role, TokenInfo
from .overlay import STORE_FILE, Change, OverlayRecord, OverlayStore

__all__ = ["ROLES", "STORE_FILE", "Change", "OverlayRecord", "OverlayStore", "Role", "TokenInfo"]
