"""API tokens: shown once, stored only as salted PBKDF2 hashes, compared in constant time.

A token reads ``il_<id>_<secret>``: ``id`` (8 hex digits) finds the row, ``secret``
(32 random bytes, URL-safe) is checked against ``PBKDF2-HMAC-SHA256(secret, salt)``.
Roles are ordered: reader < editor < admin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from ..errors import AuthError, Forbidden, InvalidRequest, NotFound
from ..requests import MAX_TOKEN_DAYS
from .overlay import OverlayStore, now_iso

Role = Literal["reader", "editor", "admin"]
ROLES: tuple[Role, ...] = ("reader", "editor", "admin")
TOKEN_PREFIX = "il"
#: PBKDF2 rounds: ~30 ms per check on one core. The secret has 256 random bits, so the rounds
#: guard a leaked database against nothing but a weak future token scheme; verified tokens are
#: remembered per process (below) so the cost is paid once, not per request.
PBKDF2_ROUNDS = 60_000
SALT_BYTES = 16
SECRET_BYTES = 32
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never its secret)."""

    id: str
    name: str
    role: Role
    created: str
    expires: str | None
    revoked: str | None

    @property
    def active(self) -> bool:
        return self.revoked is None and (self.expires is None or self.expires > now_iso())


def _hash(secret: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, PBKDF2_ROUNDS)


class TokenStore:
    """Token rows in the library's overlay store."""

    def __init__(self, store: OverlayStore) -> None:
        self.store = store
        # token id -> SHA-256 of a secret that passed PBKDF2 in this process (never the secret itself)
        self._verified: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def create(self, name: str, role: str, expires_days: int | None = None) -> tuple[str, TokenInfo]:
        """A new token and its listing; the token string is returned here only."""
        if role not in ROLES:
            raise InvalidRequest(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
        if not name.strip() or len(name) > MAX_NAME_CHARS:
            raise InvalidRequest(f"name: must be 1 to {MAX_NAME_CHARS} characters")
        if expires_days is not None and not 1 <= expires_days <= MAX_TOKEN_DAYS:
            raise InvalidRequest(f"expires_days: must be between 1 and {MAX_TOKEN_DAYS} days, got {expires_days}",
                                 parameter="expires_days")
        token_id = secrets.token_hex(4)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        salt = secrets.token_bytes(SALT_BYTES)
        created = now_iso()
        expires = None
        if expires_days is not None:
            expires = (datetime.now(UTC).replace(microsecond=0) + timedelta(days=expires_days)).isoformat()
        with self.store.write() as tx:
            tx.conn.execute("INSERT INTO tokens (id, name, role, salt, hash, created, expires) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (token_id, name.strip(), role, salt, _hash(secret, salt), created, expires))
        info = TokenInfo(token_id, name.strip(), role, created, expires, None)
        return f"{TOKEN_PREFIX}_{token_id}_{secret}", info

    def list(self) -> list[TokenInfo]:
        if not self.store.exists:
            return []
        rows = self.store.connection().execute(
            "SELECT id, name, role, created, expires, revoked FROM tokens ORDER BY created, id").fetchall()
        return [TokenInfo(*row) for row in rows]

    def revoke(self, token_id: str) -> TokenInfo:
        with self.store.write() as tx:
            cursor = tx.conn.execute("UPDATE tokens SET revoked = ? WHERE id = ? AND revoked IS NULL", (now_iso(), token_id))
            if cursor.rowcount == 0 and tx.conn.execute("SELECT 1 FROM tokens WHERE id = ?", (token_id,)).fetchone() is None:
                raise NotFound(token_id, f"no token with id {token_id!r}")
        return next(t for t in self.list() if t.id == token_id)

    def verify(self, token: str | None, need: Role) -> TokenInfo:
        """The token's listing when it is valid and its role is at least ``need``; :class:`AuthError` or :class:`Forbidden`."""
        if not token:
            raise AuthError("authorization: a bearer token is required (Authorization: Bearer il_...)")
        parts = token.split("_", 2)
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not self.store.exists:
            raise AuthError("authorization: unknown token")
        token_id, secret = parts[1], parts[2]
        row = self.store.connection().execute(
            "SELECT id, name, role, created, expires, revoked, salt, hash FROM tokens WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            raise AuthError("authorization: unknown token")
        info = TokenInfo(*row[:6])
        fingerprint = hashlib.sha256(secret.encode()).digest()
        with self._lock:
            seen = self._verified.get(token_id)
        if seen is None or not hmac.compare_digest(seen, fingerprint):
            if not hmac.compare_digest(_hash(secret, row[6]), row[7]):
                raise AuthError("authorization: unknown token")
            with self._lock:
                self._verified[token_id] = fingerprint
        if info.revoked is not None:
            raise AuthError(f"authorization: token {info.name!r} was revoked")
        if not info.active:
            raise AuthError(f"authorization: token {info.name!r} has expired")
        if ROLES.index(info.role) < ROLES.index(need):
            raise Forbidden(f"authorization: token {info.name!r} is a {info.role} token; this needs {need}")
        return info
