"""SQLite (WAL, synchronous=FULL) overlay over the YAML library.

One row per changed incident (its whole document as JSON, or a tombstone), one row per
change in an append-only log with a strictly increasing ``seq``.  A write is one
``BEGIN IMMEDIATE`` transaction: SQLite's lock serialises writers from every process,
and the commit is fsync'd before the caller is answered, so an acknowledged write
survives ``kill -9`` and power loss.  Readers poll :meth:`OverlayStore.last_seq` (one
indexed read) to learn that something changed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ReadOnlyLibrary

#: The overlay file inside a library directory (the loader only reads vocab/ and incidents/).
STORE_FILE = ".incidentlib.db"
#: Seconds a writer waits for another process's transaction before giving up; a write
#: transaction lasts milliseconds, so 30 s only trips on a stuck process.
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    doc TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    incident_id TEXT NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    at TEXT NOT NULL,
    before TEXT,
    after TEXT
);
CREATE INDEX IF NOT EXISTS changes_incident ON changes (incident_id, seq);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    salt BLOB NOT NULL,
    hash BLOB NOT NULL,
    created TEXT NOT NULL,
    expires TEXT,
    revoked TEXT
);
"""


def now_iso() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class OverlayRecord:
    """An incident as the overlay holds it: the document (validated before it was stored) or a tombstone."""

    id: str
    doc: dict[str, Any]
    deleted: bool
    seq: int


@dataclass(frozen=True)
class Change:
    """One entry of the change log: who did what to which incident, when, with the before/after documents."""

    seq: int
    incident_id: str
    action: str
    actor: str
    at: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def _loads(text: str | None) -> dict[str, Any] | None:
    return None if text is None else dict(json.loads(text))


def _dumps(doc: dict[str, Any] | None) -> str | None:
    return None if doc is None else json.dumps(doc, ensure_ascii=False, sort_keys=True)


class Transaction:
    """The write side of one ``BEGIN IMMEDIATE`` transaction (see :meth:`OverlayStore.write`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def record(self, incident_id: str) -> OverlayRecord | None:
        row = self.conn.execute("SELECT id, doc, deleted, seq FROM records WHERE id = ?", (incident_id,)).fetchone()
        return None if row is None else OverlayRecord(row[0], json.loads(row[1]), bool(row[2]), row[3])

    def ids(self) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT id FROM records")]

    def states(self) -> dict[str, bool]:
        """Every overlay id and whether it is a tombstone (one query, no documents parsed)."""
        return {row[0]: bool(row[1]) for row in self.conn.execute("SELECT id, deleted FROM records")}

    def put(self, incident_id: str, action: str, actor: str, before: dict[str, Any] | None,
            after: dict[str, Any] | None, deleted: bool = False) -> int:
        """Log the change and store ``after`` (or a tombstone keeping ``before`` for restore); returns its seq."""
        cursor = self.conn.execute(
            "INSERT INTO changes (incident_id, action, actor, at, before, after) VALUES (?, ?, ?, ?, ?, ?)",
            (incident_id, action, actor, now_iso(), _dumps(before), _dumps(after)),
        )
        seq = int(cursor.lastrowid or 0)
        doc = before if deleted else after
        self.conn.execute(
            "INSERT INTO records (id, doc, deleted, seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET doc = excluded.doc, deleted = excluded.deleted, seq = excluded.seq",
            (incident_id, _dumps(doc), int(deleted), seq),
        )
        return seq

    def log(self, incident_id: str, action: str, actor: str) -> int:
        """A change-log entry without a record change (e.g. an export to YAML)."""
        cursor = self.conn.execute("INSERT INTO changes (incident_id, action, actor, at) VALUES (?, ?, ?, ?)",
                                   (incident_id, action, actor, now_iso()))
        return int(cursor.lastrowid or 0)

    def drop(self, incident_id: str) -> None:
        """Forget the overlay row (after it was written back to YAML); the change log stays."""
        self.conn.execute("DELETE FROM records WHERE id = ?", (incident_id,))


class OverlayStore:
    """The overlay of one library directory; safe to share between threads and processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._id: str | None = None

    @classmethod
    def for_library(cls, root: Path) -> OverlayStore:
        return cls(root / STORE_FILE)

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def _connect(self, create: bool) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # a connection must not be used across fork() (SQLite's rule): a forked child opens its own
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            return conn
        if not create and not self.exists:
            raise FileNotFoundError(self.path)
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: the WAL is fsync'd at every commit, so a commit survives power loss, not only kill -9
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            # the first connection ever names the store; concurrent first connections agree (the key is unique)
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", (uuid.uuid4().hex,))
        except sqlite3.OperationalError as exc:
            raise ReadOnlyLibrary(f"{self.path}: cannot open the write store ({exc}); "
                                  "copy the library to a writable directory to change it") from None
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        """One serialised write transaction across threads and processes; committed (durably) on exit."""
        conn = self._connect(create=True)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise ReadOnlyLibrary(f"{self.path}: cannot write ({exc})") from None
        try:
            yield Transaction(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _read(self, fn: Callable[[sqlite3.Connection], Any], default: Any) -> Any:
        try:
            return fn(self._connect(create=False))
        except FileNotFoundError:
            return default

    def store_id(self) -> str:
        """A random name given to this store when it was created ("" when there is none yet).

        Change numbers restart in every new store, so ``(store id, seq)`` — not ``seq`` alone — names one
        state of the overlay: two scratch copies of a library written differently never share a content hash
        (and so never an index cache entry), while every process on one store agrees on it.
        """
        if self._id is None:
            row = self._read(lambda c: c.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone(), None)
            if row is None:
                return ""
            self._id = str(row[0])
        return self._id

    def last_seq(self) -> int:
        """The newest change id (0 when nothing was ever written): what every process polls."""
        result: int = self._read(lambda c: c.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0], 0)
        return result

    def records(self) -> list[OverlayRecord]:
        """Every overlay row, live and deleted."""
        rows = self._read(lambda c: c.execute("SELECT id, doc, deleted, seq FROM records ORDER BY id").fetchall(), [])
        return [OverlayRecord(r[0], json.loads(r[1]), bool(r[2]), r[3]) for r in rows]

    def record(self, incident_id: str) -> OverlayRecord | None:
        """One overlay row, or None when the incident was never written through the store."""
        row = self._read(lambda c: c.execute("SELECT id, doc, deleted, seq FROM records WHERE id = ?",
                                             (incident_id,)).fetchone(), None)
        return None if row is None else OverlayRecord(row[0], json.loads(row[1]), bool(row[2]), row[3])

    def history(self, incident_id: str) -> list[Change]:
        """The change log of one incident, oldest first."""
        rows = self._read(lambda c: c.execute(
            "SELECT seq, incident_id, action, actor, at, before, after FROM changes WHERE incident_id = ? ORDER BY seq",
            (incident_id,)).fetchall(), [])
        return [Change(r[0], r[1], r[2], r[3], r[4], _loads(r[5]), _loads(r[6])) for r in rows]

    def changes_since(self, seq: int) -> list[Change]:
        """Changes after ``seq``, oldest first."""
        rows = self._read(lambda c: c.execute(
            "SELECT seq, incident_id, action, actor, at, before, after FROM changes WHERE seq > ? ORDER BY seq",
            (seq,)).fetchall(), [])
        return [Change(r[0], r[1], r[2], r[3], r[4], _loads(r[5]), _loads(r[6])) for r in rows]

    def all_changes(self) -> list[Change]:
        return self.changes_since(0)

    def checkpoint(self) -> tuple[int, int]:
        """Copy the write-ahead log into the database file and truncate it: its size in bytes ``(before, after)``.

        SQLite's automatic checkpoints copy but never shrink the log, and stop short while a reader holds an
        old snapshot; ``TRUNCATE`` waits for writers and readers (up to the busy timeout) and is safe at any
        time: it never loses a committed transaction.  The size stays unchanged when a reader kept it busy.
        """
        if not self.exists:
            return 0, 0
        wal = self.path.with_name(self.path.name + "-wal")
        before = wal.stat().st_size if wal.exists() else 0
        self._connect(create=False).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return before, wal.stat().st_size if wal.exists() else 0

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (creating the store): for the token table in :mod:`.auth`."""
        return self._connect(create=True)
