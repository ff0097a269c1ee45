"""A cache of what PyYAML made of a library's data files, so a warm start skips the YAML parse.

Parsing the bundled library's few hundred YAML files takes most of its load (PyYAML's
constructor, even with the C parser); reading their bytes and hashing them takes a few
milliseconds. So a library is read as a :class:`DataFiles` snapshot (every data file's bytes,
read once), and the parsed documents are kept in ``<cache dir>/parsed/<key>.pkl`` where

    key = sha256(PARSED_FORMAT_VERSION, PyYAML's version, the loader's name,
                 every data file's path relative to the library and XXH3-128 of its bytes)

so the same bytes give the same key at any install location, and any change of a file's bytes,
a file added, removed or renamed, another PyYAML or another cache layout gives another key.

What is cached is PyYAML's output (plain dicts, lists, strings, numbers, dates), not the
validated records: every document still goes through the same pydantic validation and link
checks, so a change to the model classes can never be answered from a stale cache, and the
problems reported for a library are the same with or without it.

The cache is never a source of truth. A file is written atomically (temporary file, then
rename), starts with the XXH3-128 of its payload (checked on load; :mod:`incidentlib.checksum`), and is unpickled by an
unpickler that resolves no global but the four ``datetime`` types YAML timestamps produce:
pickle runs code only through the globals it may import, so even a file someone else placed in
the cache directory cannot run anything (it fails to load, and the YAML is parsed). A missing,
stale, corrupt or unreadable file means parsing the YAML as without a cache; a cache that
cannot be written costs only the next start.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickle
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from . import checksum
from .file_memo import Signature, signature
from .storage import atomic_write_bytes, keep_newest

log = logging.getLogger(__name__)

#: Bump when the layout of a cache file or what is stored in it changes: older files are then ignored
#: (2: XXH3-128 of each file in the key and of the payload in the header, SHA-256 before).
PARSED_FORMAT_VERSION = 2
#: Folder of the parsed-document caches inside the cache directory.
PARSED_DIR = "parsed"
#: Cache files kept (most recently used first: a hit updates the file's modification time); one per library content, a few kB to a few MB
#: each. Enough for several checkouts and a few edits of each without re-parsing; chosen, not tuned.
MAX_PARSED_FILES = 16
_MAGIC = b"incidentlib-parsed\0"
_DIGEST_BYTES = checksum.DIGEST_BYTES

try:  # the C loader is several times faster on a few hundred files
    YAML_LOADER: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    YAML_LOADER = yaml.SafeLoader

# The only globals a cache file may name: the types PyYAML's safe loader builds for timestamps.
_ALLOWED_GLOBALS = frozenset({("datetime", "date"), ("datetime", "datetime"), ("datetime", "timedelta"),
                              ("datetime", "timezone")})


class _DocsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"a parsed-YAML cache may not name {module}.{name}")
        found: type = super().find_class(module, name)
        return found


def parse_yaml(data: bytes, name: str) -> object:
    """PyYAML's safe load of ``data``, with ``name`` in error messages (as when reading the file itself)."""
    stream = io.BytesIO(data)
    stream.name = name  # PyYAML names the stream in its error marks
    return yaml.load(stream, Loader=YAML_LOADER)


def relative_name(root: Path, path: Path) -> str:
    """``path``'s name relative to ``root``, with ``/`` between parts.  A string prefix, not
    ``PurePath.relative_to``: that costs tens of microseconds a call, seconds for 100k files."""
    text, prefix = str(path), str(root) + os.sep
    return text[len(prefix):].replace(os.sep, "/") if text.startswith(prefix) else path.relative_to(root).as_posix()


@dataclass(frozen=True)
class WrittenFile:
    """A data file this process has just written: the bytes it wrote, and what reading them gives (a document, or
    for a record the :class:`~incidentlib.models.Incident` it was dumped from).  :meth:`DataFiles.read` takes the
    bytes as the file's instead of reading them back."""

    payload: bytes
    document: object


@dataclass
class DataFiles:
    """The bytes of a library's data files, read once: parsed (or taken from the cache), and hashed."""

    root: Path
    files: dict[Path, bytes | OSError]
    cache_dir: Path | None = None
    signatures: dict[Path, Signature] = field(default_factory=dict)
    _cached: dict[str, object] | None = None
    _parsed: dict[str, object] = field(default_factory=dict)
    _misses: int = 0
    _names: dict[Path, str] = field(default_factory=dict)
    _cache_read: bool = False
    #: Documents of files just written from them, by relative name: what parsing those files gives (``check_library``);
    #: a :class:`WrittenFile` gives its bytes too
    written: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path, paths: Iterable[Path], cache_dir: Path | None = None,
             written: Mapping[str, object] | None = None) -> DataFiles:
        """Read every regular file of ``paths``; with ``cache_dir``, look up their parsed documents there.  Each
        file's ``stat`` signature is taken before its bytes are read (:attr:`signatures`, for :mod:`incidentlib.file_memo`).
        ``written``: see :attr:`written`."""
        files: dict[Path, bytes | OSError] = {}
        signatures: dict[Path, Signature] = {}
        written = written or {}
        # sorted by their text: for the files of two flat folders the order of comparing the paths, without
        # PurePath.__lt__ (2 s at 100k files)
        for path in sorted(set(paths), key=str):
            just_written = written.get(relative_name(root, path)) if written else None
            if isinstance(just_written, WrittenFile):  # its bytes are known: not read back (never with a cache)
                files[path] = just_written.payload
                continue
            try:
                status = os.stat(path)
            except OSError:
                continue  # a symbolic link to nothing: reported by the loader, which lists the folder itself
            if not stat.S_ISREG(status.st_mode):
                continue  # reported by the loader
            signatures[path] = signature(status)
            try:
                files[path] = path.read_bytes()
            except OSError as exc:
                files[path] = exc
        return cls(root, files, cache_dir, signatures=signatures, written=written)

    def signatures_by_name(self) -> dict[str, Signature]:
        """Each file's signature by its name relative to the library."""
        return {self._rel(path): entry for path, entry in self.signatures.items()}

    def _load_cache(self) -> None:
        """Read the cache file on the first document asked for (a start answered by the start snapshot,
        :mod:`incidentlib.start_snapshot`, never asks)."""
        self._cache_read = True
        if self.cache_dir is not None and self.key is not None:
            self._cached = _load(self.cache_file)
            if self._cached is not None:
                with contextlib.suppress(OSError):  # last use: what _prune keeps; a read-only cache still serves
                    os.utime(self.cache_file)

    def _rel(self, path: Path) -> str:
        # asked several times per file: looked up after the first time
        name = self._names.get(path)
        if name is None:
            name = relative_name(self.root, path)
            self._names[path] = name
        return name

    @cached_property
    def key(self) -> str | None:
        """The cache key (module docstring); None when a file could not be read (nothing is cached then)."""
        digest = hashlib.sha256(f"{PARSED_FORMAT_VERSION}\0{yaml.__version__}\0{YAML_LOADER.__name__}\0".encode())
        for path, data in self.files.items():
            if isinstance(data, OSError):
                return None
            digest.update(f"{self._rel(path)}\0{checksum.checksum_bytes(data)}\0".encode())
        return digest.hexdigest()

    @property
    def cache_file(self) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / PARSED_DIR / f"{self.key}.pkl"

    def load(self, path: Path) -> object:
        """The document in ``path``: from the cache when it holds it, else parsed; raises what reading or
        parsing the file raises (``OSError``, ``yaml.YAMLError``)."""
        data = self.files.get(path)
        if data is None:  # not read with the others (it appeared since): read it now, as without a snapshot
            data = path.read_bytes()
        if isinstance(data, OSError):
            raise data
        rel = self._rel(path)
        if rel in self.written:
            doc = self.written[rel]
            if isinstance(doc, WrittenFile):
                doc = doc.document
        else:
            if not self._cache_read:
                self._load_cache()
            if self._cached is not None and rel in self._cached:
                doc = self._cached[rel]
            else:
                self._misses += 1
                doc = parse_yaml(data, str(path))
        self._parsed[rel] = doc
        return doc

    def content_hash(self) -> str:
        """A hash of every data file's name and bytes (``loader.content_hash`` of the bytes read here)."""
        digest = hashlib.sha256()
        for path, data in self.files.items():
            if isinstance(data, OSError):
                raise data
            digest.update(self._rel(path).encode())
            digest.update(b"\0")
            digest.update(data)
            digest.update(b"\0")
        return digest.hexdigest()

    def save(self) -> bool:
        """Write the cache when something was parsed and every file parsed; True when a file was written."""
        if self.cache_dir is None or self._misses == 0 or self.key is None:
            return False
        if set(self._parsed) != {self._rel(path) for path in self.files}:
            return False  # a file failed to parse: such a library is fixed before it is searched
        payload = pickle.dumps(self._parsed, protocol=pickle.HIGHEST_PROTOCOL)
        target = self.cache_file
        try:
            atomic_write_bytes(target, _MAGIC + checksum.digest(payload) + payload)
            _prune(target.parent)
        except OSError as exc:
            log.warning("could not cache the parsed library in %s (%s)", target, exc)
            return False
        return True


def _load(path: Path) -> dict[str, object] | None:
    """The documents in cache file ``path``, or None when it is absent or fails any check."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("parsed-library cache %s is unreadable (%s); parsing the YAML", path, exc)
        return None
    head = len(_MAGIC)
    payload = blob[head + _DIGEST_BYTES:]
    if not blob.startswith(_MAGIC) or checksum.digest(payload) != blob[head:head + _DIGEST_BYTES]:
        log.warning("parsed-library cache %s is corrupt (checksum); parsing the YAML", path)
        return None
    try:
        docs = _DocsUnpickler(io.BytesIO(payload)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        log.warning("parsed-library cache %s cannot be loaded (%s); parsing the YAML", path, exc)
        return None
    if not isinstance(docs, dict) or not all(isinstance(name, str) for name in docs):
        log.warning("parsed-library cache %s holds a %s; parsing the YAML", path, type(docs).__name__)
        return None
    return docs


def _prune(folder: Path) -> None:
    """Keep the :data:`MAX_PARSED_FILES` newest cache files of ``folder``."""
    keep_newest(folder, "*.pkl", MAX_PARSED_FILES)
