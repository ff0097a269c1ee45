"""Crash-safe file writes: a temporary file beside the target, then a rename; files flushed to disk together for a
journal's staging; hard links for a copy that is only read."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path


def current_umask() -> int:
    """The process umask, read without changing it where the platform allows (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: read by setting, then restore at once
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` so readers see the old or the new file, never half of one.

    The new file gets the mode of the file it replaces, or ``0o666 & ~umask`` like any
    newly created file (``mkstemp`` alone would leave it private, 0600).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~current_umask()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)  # a descriptor of ours is never inherited by a child process (0 where absent)
#: Files whose flush to disk is asked for at once: a file system commits concurrent flushes together (ext4's journal),
#: so 4,000 small files took 0.6 s this way against 4.5 s one after another on this machine's disk.
FSYNC_THREADS = 16
#: ``syncfs`` reports a failed write-back of any file of the file system since Linux 5.8; before, it returned 0
#: whatever happened, and only a flush of each file would say a payload did not reach the disk.
SYNCFS_REPORTS_ERRORS = (5, 8)


@cache
def _syncfs() -> Callable[[int], int] | None:
    """The C library's ``syncfs``, where it reports write-back errors (:data:`SYNCFS_REPORTS_ERRORS`); else None."""
    release = re.match(r"(\d+)\.(\d+)", os.uname().release) if sys.platform.startswith("linux") else None
    if release is None or (int(release[1]), int(release[2])) < SYNCFS_REPORTS_ERRORS:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def write_durably(files: Iterable[tuple[str | Path, bytes]]) -> None:
    """Write each ``(path, payload)`` in place (created with ``0o666 & ~umask``, or emptied), then flush them all to
    disk before returning.

    For files no reader looks at until a later step commits them (a journal's staged files): a temporary file and a
    rename for each would cost two more operations on the folder and make them no safer.  Paths may be plain strings:
    a ``Path`` object per file was a third of the time at 27,000 files (docs/benchmarks.md).

    The flush is one ``syncfs`` per file system where it reports errors (Linux 5.8 on): the file system's journal
    commits once for every file, 0.4–0.7× the time of a flush per file at 54,000 files on a quiet disk, and about the
    same time once the disk itself is what both wait on (docs/benchmarks.md, ``bench/bench_staging.py``).  It writes
    back the other dirty files of that file system too.  Elsewhere each file is flushed, from
    :data:`FSYNC_THREADS` threads."""
    written: list[str] = []
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC
    for path, payload in files:
        name = os.fspath(path)
        written.append(name)
        fd = os.open(name, flags, 0o666)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    syncfs = _syncfs()
    if syncfs is not None:
        _sync_file_systems(syncfs, written)
        return
    # each thread flushes its own share of the files: one task per thread, not one per file (the pool's hand-off
    # cost more than a flush of a small file)
    threads = min(FSYNC_THREADS, max(1, len(written)))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fsync") as pool:
        for _ in pool.map(_flush_all, [written[start::threads] for start in range(threads)]):
            pass  # an error (a full disk) is raised here


def _sync_file_systems(syncfs: Callable[[int], int], paths: list[str]) -> None:
    """``syncfs`` once for each file system that holds one of ``paths``, called on a folder there."""
    by_device: dict[int, str] = {}
    for folder in dict.fromkeys(os.path.dirname(path) or "." for path in paths):
        by_device.setdefault(os.stat(folder).st_dev, folder)
    for folder in by_device.values():
        fd = os.open(folder, os.O_RDONLY | _CLOEXEC)
        try:
            if syncfs(fd) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"writing files to disk failed: {os.strerror(error)}", folder)
        finally:
            os.close(fd)


def _flush_all(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def link_or_copy(source: str | Path, destination: str | Path) -> None:
    """``destination`` as a hard link to ``source`` (replacing a file there), or a copy where the file system
    refuses links.  Only for a copy that is read and then removed: writing to a link writes to ``source``."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(destination)
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def release_pages(mapped: mmap.mmap, start: int, stop: int) -> None:
    """Let this process's mapping of ``mapped[start:stop]`` go (``MADV_DONTNEED``; a file's page cache keeps the
    pages, and reading them again maps them back): whole pages only, from the page holding ``start`` to the one
    holding the byte before ``stop``, so bytes outside the range are at most re-read, never lost. No-op where
    the platform has no ``madvise``."""
    if not hasattr(mmap, "MADV_DONTNEED") or stop <= start:
        return
    first = start - start % mmap.PAGESIZE
    mapped.madvise(mmap.MADV_DONTNEED, first, min(stop, len(mapped)) - first)


def keep_newest(folder: Path, pattern: str, keep: int, used: Callable[[Path], int] | None = None) -> None:
    """Remove all but the ``keep`` most recently modified files of ``folder`` matching ``pattern`` (a cache's
    eviction: each cache sets the modification time of a file it uses), or most recently used by ``used``
    (nanoseconds; raises ``OSError`` for a file gone)."""
    entries = []
    for entry in folder.glob(pattern):
        with contextlib.suppress(OSError):  # removed meanwhile by another process
            entries.append((entry.stat().st_mtime_ns if used is None else used(entry), entry))
    for _, entry in sorted(entries, reverse=True)[keep:]:
        entry.unlink(missing_ok=True)
