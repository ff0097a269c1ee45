"""Which cache files were already verified, remembered beside each file with its ``stat`` signature, so that a
start does not hash gigabytes it hashed at the last start.

Every persisted artefact is checked when it is loaded: its XXH3-128 against the value its metadata holds, and for
some, the ranges of its values.  At 100k incidents that is a pass over 5 GB at every start (the dense vectors,
the BM25 postings, the start snapshot): 14 s of hashing and reading in one profiled start, against a 5 s target.
Yet between two starts these files do not change: they are written once, under a temporary name then renamed, and
never written in place.  So after a pass that verified a file, what it found is kept in ``<file>.verified``::

    {"format": 1, "checksum": "xxh3_128:...", "checks": "...", "signature": [size, mtime_ns, ctime_ns, inode, device]}

with the file's signature taken *before* its bytes were read (:func:`incidentlib.file_memo.signature`), and a
later load skips the pass when the file's signature, the expected checksum and the checks (a caller's name for
what else it verified, with their parameters) are all the same.  This is how :mod:`incidentlib.file_memo` decides
the data files are unchanged, and it is sound for the same reasons (a write changes ``ctime``, which no tool can set
back; a rename gives another inode), with the same guard: no memo is written for a file changed less than
:data:`~incidentlib.file_memo.RACY_SECONDS` ago, since a second write within one tick of the file system's clock
would leave the same signature.  What it does not detect is what no signature can: bytes that change on the
medium with no write (a failing disk).  Those are the file system's to report; the memo trades that case for
not reading every index at every start.

A memo is never a source of truth: a missing, damaged or stale one means verifying as without it; one that cannot
be written (a read-only cache) costs only the next start.  The cache directory is trusted as it is for the
checksums themselves (:mod:`incidentlib.checksum`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from . import checksum, file_memo
from .file_memo import Signature
from .storage import atomic_write_bytes

log = logging.getLogger(__name__)

#: Bump when the memo's layout or what it means changes: older memos are then ignored.
VERIFIED_FORMAT_VERSION = 1
#: Appended to a file's name to give its memo's.
SUFFIX = ".verified"


def memo_path(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def current_signature(path: Path) -> Signature | None:
    """The file's signature now, or None when it is not a readable regular file."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return file_memo.signature(status)


def recall(path: Path, expected: str, checks: str = "", signature: Signature | None = None) -> bool:
    """Whether ``path`` (whose signature is ``signature``, taken now when not given) was verified, with that very
    signature, to hash to ``expected`` and to pass ``checks``."""
    found = signature if signature is not None else current_signature(path)
    if found is None or not expected:
        return False
    try:
        memo = json.loads(memo_path(path).read_bytes())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        log.warning("verified memo %s cannot be read (%s); verifying the file", memo_path(path), exc)
        return False
    return (isinstance(memo, dict) and memo.get("format") == VERIFIED_FORMAT_VERSION
            and memo.get("checksum") == expected and memo.get("checks") == checks
            and isinstance(memo.get("signature"), list) and tuple(memo["signature"]) == found)


def remember(path: Path, before: Signature, expected: str, checks: str = "") -> bool:
    """Keep that ``path``, whose signature was ``before`` when its bytes were read, hashed to ``expected`` and passed
    ``checks``; True when written.  Not written when the file changed since ``before`` or less than
    :data:`~incidentlib.file_memo.RACY_SECONDS` before (module docstring)."""
    if current_signature(path) != before:
        return False
    if max(before[1], before[2]) > time.time_ns() - int(file_memo.RACY_SECONDS * 1e9):
        return False
    memo = {"format": VERIFIED_FORMAT_VERSION, "checksum": expected, "checks": checks, "signature": list(before)}
    try:
        atomic_write_bytes(memo_path(path), json.dumps(memo, separators=(",", ":")).encode())
    except OSError as exc:
        log.debug("could not write the verified memo of %s (%s)", path, exc)
        return False
    return True


def file_matches(path: Path, expected: str | None, compute: Callable[[Path, str], str | None] | None = None) -> bool:
    """Whether the file hashes to ``expected`` (``compute(path, expected)`` gives its checksum by the algorithm
    ``expected`` names, or None when it names none it knows; by default :func:`incidentlib.checksum.checksum_file`):
    from the memo when the file is as it was when last found to match, else computed, and a match remembered.
    Raises ``OSError`` as reading does."""
    if not expected:
        return False
    before = current_signature(path)
    if before is not None and recall(path, expected, signature=before):
        return True
    found = checksum.checksum_file(path) if compute is None else compute(path, expected)
    matches = found == expected
    if matches and before is not None:
        remember(path, before, expected)
    return matches


def touch(path: Path) -> None:
    """Mark ``path`` as used now for a cache's eviction order (:func:`last_used`): its memo's time when it has one,
    since setting the file's own time changes its signature and so voids the memo."""
    for target in (memo_path(path), path):
        try:
            os.utime(target)
            return
        except FileNotFoundError:
            continue
        except OSError:  # a read-only cache still serves
            return


def last_used(path: Path) -> int:
    """When ``path`` was last used (nanoseconds): the later of its own and its memo's modification time (:func:`touch`).
    Raises ``OSError`` when ``path`` is gone."""
    used = path.stat().st_mtime_ns
    with contextlib.suppress(OSError):
        used = max(used, memo_path(path).stat().st_mtime_ns)
    return used
