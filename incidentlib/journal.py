"""All-or-nothing writes of many files into a library directory (a write-ahead journal).

A change is staged in ``<root>/.incidentlib-journal/`` and becomes real in one
atomic step: the rename that creates ``manifest.json``.  Then the staged files
are moved into place one ``os.replace`` at a time and the journal is removed.

* Killed before the manifest exists: the library is untouched; the next command
  deletes the journal (roll back).
* Killed after it: the next command moves the files still staged into place and
  deletes the journal (roll forward).  Each move is atomic and moving is
  idempotent (a file already moved is no longer staged), so a command killed
  during recovery is finished by the one after it.

Either way, after the next command the directory equals the state before or the
state after the change, with no temporary files.  :func:`recover` runs whenever
a library is loaded (``incidentlib.loader.check_library``).

A new library directory is built complete in a sibling ``.<name>.incidentlib-new-<pid>-*``
directory and renamed into place (one atomic step, the target did not exist);
:func:`recover` removes such siblings left by a killed process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .storage import atomic_write_text, current_umask, write_durably

JOURNAL_DIR = ".incidentlib-journal"
NEW_DIR_MARK = ".incidentlib-new-"
MANIFEST = "manifest.json"
OWNER = "owner"
STAGED = "files"


class JournalBusy(RuntimeError):
    """Another live process is writing to this library."""


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _owner(folder: Path) -> int | None:
    try:
        return int((folder / OWNER).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _roll_forward(root: Path, journal: Path) -> None:
    manifest = json.loads((journal / MANIFEST).read_text(encoding="utf-8"))
    staged_root = os.path.join(journal, STAGED)
    made: set[str] = set()
    touched: set[str] = set()
    for rel in manifest["files"]:  # names as text: a Path per file was most of the time at 27,000 files
        folder = os.path.dirname(rel)
        if folder not in made:
            (root / folder).mkdir(parents=True, exist_ok=True)
            made.add(folder)
        try:
            os.replace(os.path.join(staged_root, rel), os.path.join(root, rel))
        except FileNotFoundError:
            continue  # moved already, by a roll-forward that was stopped
        touched.add(folder)
    for folder in touched:
        _fsync_dir(root / folder)


def recover(root: Path) -> str | None:
    """Finish or undo an interrupted change under ``root``; say which (``"completed"``/``"rolled back"``), or ``None``."""
    if root.parent.is_dir():
        _remove_dead_new_dirs(root)
    journal = root / JOURNAL_DIR
    if not journal.is_dir():
        return None
    owner = _owner(journal)
    if owner is not None and owner != os.getpid() and _alive(owner):
        return None  # a live writer: its change is not interrupted
    if (journal / MANIFEST).is_file():
        _roll_forward(root, journal)
        outcome = "completed"
    else:
        outcome = "rolled back"
    shutil.rmtree(journal, ignore_errors=True)
    return outcome


def _remove_dead_new_dirs(root: Path) -> None:
    parent = root.parent
    prefix = f".{root.name}{NEW_DIR_MARK}"
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return
    for candidate in candidates:
        pid_text = candidate.name[len(prefix):].split("-", 1)[0]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            shutil.rmtree(candidate, ignore_errors=True)


def commit_files(root: Path, files: Mapping[str, bytes], before_commit: Callable[[Path], None] | None = None) -> None:
    """Write ``files`` (paths relative to ``root`` → their bytes) into ``root`` all or nothing.

    ``files`` is staged in its own order, each file's bytes read as it is written (a mapping may make them then).

    ``before_commit(staging_root)`` may inspect the staged files (they sit under
    ``staging_root`` at their relative paths) and raise to abandon the change.
    """
    recover(root)
    journal = root / JOURNAL_DIR
    try:
        journal.mkdir()
    except FileExistsError:
        raise JournalBusy(f"another process (pid {_owner(journal)}) is writing to {root}; try again when it ends") from None
    try:
        atomic_write_text(journal / OWNER, str(os.getpid()))
        staged_root = journal / STAGED
        folders = {os.path.dirname(rel) for rel in files}
        for folder in folders:
            (staged_root / folder).mkdir(parents=True, exist_ok=True)
        # no temporary file and rename per staged file: until the manifest exists the change is removed whole
        write_durably((os.path.join(staged_root, rel), payload) for rel, payload in files.items())
        if before_commit is not None:
            before_commit(staged_root)
        for folder in folders:
            _fsync_dir(staged_root / folder)
        atomic_write_text(journal / MANIFEST, json.dumps({"files": sorted(files)}))  # the commit point
        _fsync_dir(journal)
    except BaseException:
        shutil.rmtree(journal, ignore_errors=True)
        raise
    _roll_forward(root, journal)
    shutil.rmtree(journal, ignore_errors=True)


class NewDirectory:
    """A scratch directory that becomes ``target`` when the ``with`` block ends, unless ``keep`` is set False."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keep = True


@contextmanager
def new_directory(target: Path) -> Iterator[NewDirectory]:
    """Yield a sibling scratch directory; on success rename it to ``target`` (which must not exist, or be empty)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}{NEW_DIR_MARK}{os.getpid()}-", dir=target.parent))
    os.chmod(scratch, 0o777 & ~current_umask())  # mkdtemp makes it private; a library folder follows the umask
    handle = NewDirectory(scratch)
    try:
        yield handle
        if handle.keep:
            try:
                os.rename(scratch, target)  # POSIX replaces an empty directory in the same step
            except OSError:
                if not target.is_dir() or any(target.iterdir()):
                    raise
                target.rmdir()  # where a rename does not replace a directory
                os.rename(scratch, target)
            _fsync_dir(target.parent)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
