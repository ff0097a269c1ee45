"""What a library's data files hashed to, remembered with each file's ``stat`` signature, so that a start whose
files are unchanged reads none of them.

A start answered by the start snapshot (:mod:`incidentlib.start_snapshot`) needs only two hashes of the data
files: the key of their parsed-YAML cache (:attr:`parsed_cache.DataFiles.key`, which the snapshot key is made of)
and the library's content hash (``LibraryData.content_hash``).  Both are functions of every file's bytes, and
reading those bytes was most of such a start at 100k incidents: 13.8 s of reading 749 MB against 0.85 s of
``stat`` calls for the same 100k files (one run, ``docs/benchmarks.md``).  So after a load that read every file,
both hashes are kept in ``<cache dir>/files/<sha256 of the library's path>.json`` with each file's

    signature = (size, st_mtime_ns, st_ctime_ns, st_ino, st_dev)

taken *before* its bytes were read, and the next load takes the hashes from there when the same relative paths
exist and every signature is the same.  This is how ``git status`` decides a file is unchanged, and it is sound for
the same reasons: a write to a file changes its ``ctime`` (which no tool can set back), replacing it by a rename
changes its inode, and a signature taken before the read can only be older than the bytes read, so a write
during the load shows as a change at the next start, never as a match.  One case is left: two writes within one
tick of the file system's clock (a few milliseconds on Linux) leave the same signature.  A memo is therefore
not written while any file was changed less than :data:`RACY_SECONDS` ago; the next start reads everything
and writes it then.

The memo is keyed by the library's path because it describes that directory's files; the caches it leads to
(parsed YAML, start snapshot, indexes) stay keyed by content.  It is never a source of truth: a missing, damaged
or stale memo means reading every file, as without it, and a memo that cannot be written costs only the next
start.  The cache directory is trusted as the other caches are (see :mod:`incidentlib.checksum`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from .storage import atomic_write_bytes, keep_newest

log = logging.getLogger(__name__)

#: Bump when the memo's layout or what its hashes mean changes: older memos are then ignored.
MEMO_FORMAT_VERSION = 1
#: Folder of the memos inside the cache directory.
MEMO_DIR = "files"
#: A file changed less than this long before a memo would be written leaves the memo unwritten: the coarsest file
#: time stamps in use (FAT and some network file systems: 2 s) could give a second write within that time the
#: same signature as the first.  Chosen from those granularities, not tuned.
RACY_SECONDS = 2.0
#: Memos kept (most recently written first): one per library directory a cache serves.  Chosen, not tuned.
MAX_MEMOS = 16

Signature = tuple[int, int, int, int, int]


_SIGNATURE = operator.attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")
_MODE = operator.attrgetter("st_mode")


def signature(status: os.stat_result) -> Signature:
    """The five ``stat`` fields that change whenever a file's bytes can have (module docstring)."""
    found: Signature = _SIGNATURE(status)
    return found


@dataclass(frozen=True)
class FileHashes:
    """The two hashes of a library's data files that a start needs."""

    files_key: str
    content_hash: str


def memo_path(cache_dir: Path, root: Path) -> Path:
    name = hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:32]
    return cache_dir / MEMO_DIR / f"{name}.json"


def recall(cache_dir: Path, root: Path, names: Mapping[str, str | Path]) -> FileHashes | None:
    """The hashes remembered for ``root`` when its data files (``names``: relative name → path) are exactly the
    remembered ones with the remembered signatures; None otherwise (then every file is read)."""
    path = memo_path(cache_dir, root)
    try:
        memo = orjson.loads(path.read_bytes())  # 109 against 178 ms for json on a 100k-file memo (best of 5)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("file memo %s cannot be read (%s); reading every data file", path, exc)
        return None
    if not (isinstance(memo, dict) and memo.get("format") == MEMO_FORMAT_VERSION
            and memo.get("root") == str(root.absolute()) and isinstance(memo.get("files"), dict)
            and isinstance(memo.get("files_key"), str) and isinstance(memo.get("content_hash"), str)):
        return None
    remembered: dict[str, object] = memo["files"]
    if remembered.keys() != names.keys():
        return None  # a file added, removed or renamed
    expected = [entry for entry in map(remembered.__getitem__, names) if isinstance(entry, list)]
    if len(expected) != len(names):
        return None
    # C-level loops over 100k files: the per-file Python loop cost as much as the stat calls themselves
    try:
        statuses = list(map(os.stat, names.values()))
    except OSError:
        return None
    if not all(map(stat.S_ISREG, map(_MODE, statuses))) or list(map(_SIGNATURE, statuses)) != list(map(tuple, expected)):
        return None
    return FileHashes(memo["files_key"], memo["content_hash"])


def remember(cache_dir: Path, root: Path, signatures: dict[str, Signature], hashes: FileHashes) -> bool:
    """Keep ``hashes`` for ``root`` with the ``signatures`` its files had before they were read; True when written.
    Not written while a file is more recent than :data:`RACY_SECONDS` (module docstring)."""
    newest = max((max(entry[1], entry[2]) for entry in signatures.values()), default=0)
    if newest > time.time_ns() - int(RACY_SECONDS * 1e9):
        return False
    memo = {"format": MEMO_FORMAT_VERSION, "root": str(root.absolute()), "files_key": hashes.files_key,
            "content_hash": hashes.content_hash, "files": {name: list(entry) for name, entry in signatures.items()}}
    target = memo_path(cache_dir, root)
    try:
        atomic_write_bytes(target, json.dumps(memo, separators=(",", ":")).encode())
        keep_newest(target.parent, "*.json", MAX_MEMOS)
    except OSError as exc:
        log.warning("could not write the file memo %s (%s)", target, exc)
        return False
    return True
