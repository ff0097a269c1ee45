"""One exception hierarchy for the library; the CLI, the HTTP API and MCP each map it once.

    IncidentlibError
    ├── NotFound (also KeyError)            -> CLI exit 1, HTTP 404, MCP tool error
    │   ├── IncidentNotFound
    │   ├── UnknownNodeError
    │   └── UnknownClusterError
    ├── InvalidRequest (also ValueError)    -> CLI exit 2, HTTP 422, MCP tool error
    │   ├── FilterError
    │   ├── QueryError
    │   ├── ClusterLimitError               a clustering method asked of more incidents than it can hold
    │   ├── InputError                      (names ``where`` and ``reason``)
    │   │   ├── SeriesError                 a metric series that cannot be read
    │   │   └── AlertError                  an alert payload that cannot be read
    │   ├── SparqlError                     -> HTTP 400
    │   │   ├── ReadOnlyError
    │   │   ├── RemoteAccessError
    │   │   └── SparqlMemoryError
    │   └── ValidationFailed                -> HTTP 422 naming every problem's field
    ├── DataError (also ValueError)         -> a library or an input file cannot be used
    │   ├── LibraryError
    │   ├── ReadError
    │   ├── MappingError
    │   ├── ImportFailed
    │   └── TableError                      a data/diagnosis/*.yaml table that does not validate
    ├── EmbedderUnavailable (also RuntimeError)
    ├── GraphStoreError (also RuntimeError) -> CLI exit 2, HTTP 503 (the graph store cannot be opened or reached)
    ├── SearchBackendError (also RuntimeError) -> CLI exit 2, HTTP 503 (the search backend cannot be opened or reached)
    ├── SparqlTimeout                       -> HTTP 503
    ├── Busy                                -> HTTP 503 with Retry-After
    │   ├── SparqlBusy                      every SPARQL slot is taken
    │   │   └── GraphNotReady               the graph is still built after start
    │   └── TaggerNotReady                  the concept tagger pasted text needs is still prepared after start
    ├── WriteError                          -> a write that cannot be applied
    │   ├── PreconditionFailed              -> HTTP 412 (stale If-Match)
    │   ├── PreconditionRequired            -> HTTP 428 (no If-Match)
    │   ├── StateConflict                   -> HTTP 409 (e.g. publishing a published record)
    │   └── ReadOnlyLibrary                 -> HTTP 409 (no writable store, e.g. the bundled library)
    └── AuthError                           -> HTTP 401 (no, unknown, revoked or expired token)
        └── Forbidden                       -> HTTP 403 (the token's role is too low)

    KeyboardInterrupt
    └── ImportInterrupted                   Ctrl-C during an import, the library already settled -> CLI exit 130

The extra built-in bases keep ``except KeyError`` / ``except ValueError`` callers working.
Every message names the file, field or parameter and the reason.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .loader import Problem

#: Problems quoted in a LibraryError message before "… and N more" (the rest are on ``.problems``).
MAX_PROBLEMS_SHOWN = 20
#: A path into a JSON payload as alert errors name it: ``alerts``, ``alerts[2]``, ``alerts[2].labels``.
_PAYLOAD_PATH = re.compile(r"[A-Za-z_]\w*(\[\d+\])*(\.[A-Za-z_]\w*(\[\d+\])*)*")


class IncidentlibError(Exception):
    """Base of every error this package raises on purpose."""


# ---- lookups -------------------------------------------------------------------------
class NotFound(IncidentlibError, KeyError):
    """A lookup that found nothing; the message names what was asked for and close matches."""

    def __init__(self, key: str, message: str, suggestions: list[str] | None = None) -> None:
        self.key = key
        self.suggestions = suggestions or []
        hint = f" (did you mean {', '.join(self.suggestions)}?)" if self.suggestions else ""
        super().__init__(message + hint)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class IncidentNotFound(NotFound):
    """No incident with that id."""

    def __init__(self, incident_id: str, suggestions: list[str] | None = None) -> None:
        self.incident_id = incident_id
        super().__init__(incident_id, f"no incident with id {incident_id!r}", suggestions)


class UnknownNodeError(NotFound):
    """A node reference that names no incident or concept."""

    def __init__(self, reference: str, suggestions: list[str] | None = None) -> None:
        self.reference = reference
        super().__init__(reference, f"unknown incident or concept {reference!r}", suggestions)


class UnknownClusterError(NotFound):
    """No cluster with that id."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        super().__init__(
            cluster_id,
            f"no cluster with id {cluster_id!r} (ids look like g-01 for graph and e-01 for embedding clusters)",
        )


# ---- bad requests ----------------------------------------------------------------------
class InvalidRequest(IncidentlibError, ValueError):
    """A parameter that cannot be used; the message names the parameter and the reason.

    ``parameter``, when known, is the name of the argument the library was given (the HTTP API puts where the
    request carried it in ``loc``); ``path`` is where inside it the bad value is (``(0,)``: its first item), and
    ``others`` names further arguments the problem is about (a range given backwards names both ends).
    """

    def __init__(self, message: str, parameter: str | None = None, path: tuple[str | int, ...] = (),
                 others: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.path = path
        self.others = others


class FilterError(InvalidRequest):
    """A filter names something the vocabulary does not know."""


class QueryError(InvalidRequest):
    """A query that cannot be run (empty or too long)."""


class ClusterLimitError(InvalidRequest):
    """A clustering method asked of more incidents than it can hold (the message names the method and the bound)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, parameter="method")


class SparqlError(InvalidRequest):
    """A SPARQL query that cannot be run: a syntax error or an update."""


class ReadOnlyError(SparqlError):
    """Raised for SPARQL UPDATE: the library graph is read-only."""


class InputError(InvalidRequest):
    """Input the library cannot use; the message names the file/field/parameter and the reason."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


class SeriesError(InputError):
    """A metric series that cannot be read (bad file, column, value or size)."""


class AlertError(InputError):
    """An alert payload that cannot be read; ``where`` is a path into it (``alerts[2].labels``) or ``body``."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(where, reason)
        if where != "body" and _PAYLOAD_PATH.fullmatch(where):
            parts = [int(part) if part.isdigit() else part for part in re.findall(r"\w+", where)]
            self.parameter, self.path = str(parts[0]), tuple(parts[1:])
class RemoteAccessError(SparqlError):
    """A query asked for SERVICE or a FROM dataset: the service never fetches anything on a query's behalf."""


class SparqlMemoryError(SparqlError):
    """The query needed more memory than the per-query cap."""


# ---- data ------------------------------------------------------------------------------
class LabelError(InvalidRequest):
    """A ``--labels`` value that is neither a known record field nor a readable labels file."""


class ReviewError(InvalidRequest):
    """A review that names an inferred link the record does not propose, or accepts and rejects one."""


class DataError(IncidentlibError, ValueError):
    """A library directory or an input file that cannot be used."""


class LibraryError(DataError):
    """Raised when a library directory cannot be used; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems[:MAX_PROBLEMS_SHOWN])
        more = f"\n  … and {len(problems) - MAX_PROBLEMS_SHOWN} more" if len(problems) > MAX_PROBLEMS_SHOWN else ""
        super().__init__(f"library has {len(problems)} problem(s):\n{lines}{more}")


class ReadError(DataError):
    """The input file cannot be read as the given format."""


class MappingError(DataError):
    """A --map option that cannot be understood."""


class ImportFailed(DataError):
    """The import cannot run at all (bad options, unreadable input, broken target library)."""


class ImportInterrupted(KeyboardInterrupt):
    """Ctrl-C during an import, raised once the target library is settled (``incidentlib.journal.recover``):
    ``completed`` when the import had been committed and is now whole; otherwise nothing of it was written.  A
    ``KeyboardInterrupt``, so that a caller that does not know it still stops."""

    def __init__(self, target: str, completed: bool) -> None:
        super().__init__(target, completed)
        self.target = target
        self.completed = completed


class TableError(DataError):
    """A diagnosis table (data/diagnosis/*.yaml) that does not validate: a server-side problem."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


class ValidationFailed(InvalidRequest):
    """A written record breaks a rule of ``incidentlib validate``; ``problems`` name each field."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems[:MAX_PROBLEMS_SHOWN]))


# ---- writes and access --------------------------------------------------------------------
class WriteError(IncidentlibError):
    """A write that cannot be applied as asked; nothing was stored."""


class PreconditionFailed(WriteError):
    """The If-Match ETag is not the record's current one: someone else wrote first."""


class PreconditionRequired(WriteError):
    """An update without If-Match: updates must name the version they change."""


class StateConflict(WriteError):
    """The record is not in a state that allows this change (e.g. publishing a published record)."""


class ReadOnlyLibrary(WriteError):
    """The library has no writable store (e.g. the bundled library inside the wheel)."""


class AuthError(IncidentlibError):
    """No token, or an unknown, revoked or expired one."""


class Forbidden(AuthError):
    """The token is valid but its role does not allow this operation."""


# ---- environment -----------------------------------------------------------------------
class EmbedderUnavailable(IncidentlibError, RuntimeError):
    """The embedding backend cannot run here (missing package or model files)."""


class GraphStoreError(IncidentlibError, RuntimeError):
    """The configured graph store cannot be opened, loaded or reached; the message names the store and the reason."""


class SearchBackendError(IncidentlibError, RuntimeError):
    """The configured search backend (``--search-backend``) cannot be opened, filled or reached, or holds a
    collection it must not overwrite; the message names the option, the target and the reason."""


class SparqlTimeout(IncidentlibError):
    """The query ran longer than the configured limit and was stopped."""


class Busy(IncidentlibError):
    """What the request needs is not available yet; the caller should retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SparqlBusy(Busy):
    """Every SPARQL slot is taken; the caller should retry after ``retry_after`` seconds."""


class TaggerNotReady(Busy):
    """The concept tagger that pasted text needs (similar and diagnose by text) is still being fitted or loaded
    after the server started (``serve`` prepares it in the background); retry after ``retry_after`` seconds."""


class GraphNotReady(SparqlBusy):
    """The graph a query needs is still being built after the server started listening (``serve`` builds it in
    the background); the query waited its time limit and should be retried after ``retry_after`` seconds."""


__all__ = [
    "AlertError",
    "AuthError",
    "ClusterLimitError",
    "DataError",
    "EmbedderUnavailable",
    "FilterError",
    "Forbidden",
    "GraphNotReady",
    "GraphStoreError",
    "ImportFailed",
    "IncidentNotFound",
    "IncidentlibError",
    "InputError",
    "InvalidRequest",
    "LabelError",
    "LibraryError",
    "MappingError",
    "NotFound",
    "PreconditionFailed",
    "PreconditionRequired",
    "QueryError",
    "ReadError",
    "ReadOnlyError",
    "ReadOnlyLibrary",
    "RemoteAccessError",
    "ReviewError",
    "SearchBackendError",
    "SeriesError",
    "SparqlBusy",
    "SparqlError",
    "SparqlMemoryError",
    "SparqlTimeout",
    "StateConflict",
    "TableError",
    "UnknownClusterError",
    "UnknownNodeError",
    "ValidationFailed",
    "WriteError",
]
