"""Persisted dense indexes: keyed by content, self-describing, reused when fresh, rebuilt when stale.

Layout under the cache directory::

    <cache>/<embedder slug>/<content key>/
        meta.json                 format version, embedder, dim, content hash, index kind, checksums
        build-<hash>/             one complete build
            chunks.jsonl          chunk id, digest and incident of every row, in row order
            row_chunks-<d>.npy    each row's chunk position (-1: dead) for the chunks of digest d, when not in order
            vectors.npy           the embeddings (exact index), row i = chunk i
            index.faiss           or the FAISS HNSW index, which holds the vectors itself
            ivf.faiss             or the FAISS inverted file of 8-bit codes (with vectors.npy, memory-mapped)

The content key is ``sha256(format version, embedder name, dim, library content hash)``, not
the library's path: a copy of a library in another directory (another checkout, another
install location) finds the index its twin built and embeds nothing.

A build is written into a temporary directory that is renamed into place, and
``meta.json`` is replaced atomically afterwards, so a crash leaves the previous
build in service.  Each embedder has its own folder, so indexes never mix.

A cache is verified before use: format version, the checksum of each build file
(XXH3-128, recorded in ``meta.json`` with the algorithm's name; see :mod:`incidentlib.checksum`), one well-formed row per vector, a 2-D float matrix of
the embedder's width with only finite values, and an index of the same size.
A cache that fails any check is rebuilt from scratch with a warning naming the
reason (``BuildReport.warning``); a damaged cache never stops a command.

``meta.json`` also records :func:`rows_digest` of the build's rows.  When the chunks asked for give the
same value, the rows file is checked against its checksum but not parsed: its rows are those chunks, in that
order (at 1.35M rows, parsing the file and matching its rows against the chunks was most of the index's load).  A
build whose rows are its chunks in another order (new chunks appended after an earlier build's rows) records the
chunks' digest and each row's chunk position (its row map, :func:`row_map_name`) instead, and is served the same way.  Any other
build is read and matched row by row, its rows as two 64-bit words each (:mod:`.row_keys`), and the order found is
recorded for the next start.

When the library changes, its content key changes too; the build for the new key takes the
vectors of unchanged chunks (same id and text digest) from a *donor*: the build made from the
same library directory before (recorded in ``meta.json``), else the most recently used build
of the same embedder.  Only new or edited chunks are embedded (a carried index being compacted
lends the vectors it holds).  An HNSW graph or inverted file is extended with the new rows
(incremental add: no graph rebuilt, no lists trained); the rows of edited or removed chunks stay
in it dead (the row map gives them -1) while at most :data:`MAX_DEAD_SHARE` of its rows
are.  Otherwise the index is built again from the reused and new vectors.  The donor of the same
directory is then removed (superseded), and at most ``KEEP_BUILDS`` content folders are kept per
embedder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypedDict

import numpy as np
import xxhash
from pydantic import BaseModel

from .. import checksum, verified_memo
from ..embeddings import Embedder
from ..row_sequence import GatheredRows, joined_lines
from ..storage import atomic_write_bytes, atomic_write_text
from . import dense
from .chunks import Chunk, chunk_digests, chunk_ids, chunk_incident_ids, chunk_texts
from .dense import DEFAULT_HNSW_THRESHOLD, DEFAULT_IVF_THRESHOLD, ProgressFn, VectorIndex
from .row_keys import DIGEST_DIGITS, RowKeys, match

#: On-disk layout version; a different number means "rebuild" (2: meta.json holds a checksum per build file;
#: 3: folders keyed by content, the exact index is vectors.npy alone, an HNSW index holds its vectors;
#: 4: the checksums are XXH3-128 (:mod:`incidentlib.checksum`), SHA-256 before; 5: the BM25 tokens of a kernel Xid
#: line changed, "NVRM: Xid (PCI:…): 79" now yields xid79, so postings built before must be built again).
FORMAT_VERSION = 5
#: Formats whose builds are still read as donors of their vectors: format 3 differs only in its checksums (verified
#: with the SHA-256 they name) and format 4 only in its BM25 tokens, so moving to format 5 rewrites the index files
#: and embeds nothing.
DONOR_FORMATS = frozenset({3, 4, FORMAT_VERSION})
#: Texts per embedder call while building: amortises the call overhead and keeps progress updates frequent.
EMBED_BATCH = 64
ROWS_FILE = "chunks.jsonl"
#: A build whose rows are its chunks in another order (new chunks appended after a donor's rows) records each row's
#: chunk position (int64) in ``row_chunks-<chunks digest>.npy``, so a start with those chunks serves it without
#: reading its rows file.  One file per chunk order, never overwritten: a start reading one map is never handed
#: another's bytes (:func:`row_map_name`).
ROW_CHUNKS_PREFIX = "row_chunks-"
#: Rows per block when a rows file is read or written or rows are gathered: bounds the transient Python objects
#: (a few MB a block) whatever the library's size.  Chosen by that argument, not tuned.
ROW_BLOCK = 65_536
#: An HNSW graph or inverted file whose chunks were edited or removed keeps the old rows, dead (no chunk maps to
#: them), and appends the new ones, as long as at most this share of its rows would be dead; beyond it the index is
#: built again.  Appending costs a copy of the rows file; a rebuild of an inverted file at 1M incidents trains and
#: adds 13.5M rows again (minutes).  A quarter keeps the first dense fetch (30 rows per wanted incident, about 11
#: chunks each) at 22 live rows or more per incident, so dead rows rarely cost a second search.  Chosen by that
#: argument, not tuned.
MAX_DEAD_SHARE = 0.25
#: Chunks embedded between two checkpoints of a build: an interrupted build resumes from the last one.  4,096
#: chunks are under half a minute of use-m3 on this 2-core machine and 8 MB of 512-d vectors: little work is
#: lost and few files are written.  Chosen by that argument, not tuned.
RESUME_SEGMENT = 4096
#: Where a build in progress keeps its checkpoints, inside the content folder (removed when the build is done).
PARTIAL_DIR = ".partial"
#: The inverted file's float32 rows (:data:`.ivf.VECTORS_FILE`, not imported from there: that module loads FAISS,
#: which a start that only reuses an index does not need yet).
IVF_VECTORS_FILE = "vectors.npy"
#: How the folders a build is written to before it is renamed into place begin (``.build-<pid>-<random>``).
STAGING_PREFIX = ".build-"
#: A staging folder of a process that no longer runs is removed once nothing in it has been written for this long: a
#: build writes its staging folder for minutes (the rows, then the index), never a day, so a day keeps any live build
#: safe, even one in another container whose process this one cannot see.
ORPHAN_AGE_S = 24 * 3600
#: Content folders kept per embedder: a few versions or copies of libraries stay warm, and the cache cannot
#: grow without bound when many scratch libraries (tests, evaluations) are indexed.  Chosen by hand.
KEEP_BUILDS = 8
_BUILD_NAME = re.compile(r"^build-[0-9a-f]{1,64}-\d+$")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

log = logging.getLogger(__name__)



class IndexRow(TypedDict):
    """One row of ``chunks.jsonl``: the chunk in that index row, its text digest and its incident."""

    id: str
    digest: str
    incident: str


def index_row(chunk: Chunk) -> IndexRow:
    """The persisted row describing ``chunk``."""
    return {"id": chunk.id, "digest": chunk.digest, "incident": chunk.incident_id}


def rows_digest(ids: Sequence[str], digests: Sequence[str]) -> str:
    """XXH3-128 of every row's chunk id, then every row's text digest, in row order (ids and digests hold no newline):
    equal for two row lists exactly when they name the same chunks with the same texts in the same order."""
    hasher = xxhash.xxh3_128()
    hasher.update(joined_lines(ids))
    hasher.update(b"\0")
    hasher.update(joined_lines(digests))
    return f"{checksum.ALGORITHM}:{hasher.hexdigest()}"


def _parse_row(line: str) -> IndexRow:
    value = json.loads(line)
    if not isinstance(value, dict) or not all(isinstance(value.get(key), str) for key in IndexRow.__annotations__):
        raise ValueError(f"not an index row: {line[:80]!r}")
    return {"id": value["id"], "digest": value["digest"], "incident": value["incident"]}


class IndexMeta(BaseModel):
    format_version: int
    embedder: str
    dim: int
    content_hash: str
    chunks: int
    index_kind: str
    build: str
    built_at: float
    embedded_now: int = 0
    reused: int = 0
    resumed: int = 0
    checksums: dict[str, str] = {}
    #: The library directory the build was made from: a hint for choosing a donor, never a key.
    library: str = ""
    #: :func:`rows_digest` of the build's rows ("" for a build written before it existed): a start whose chunks
    #: give the same value reuses the build without reading its rows file.
    rows_digest: str = ""
    #: :func:`rows_digest` of the chunks, in their own order, whose positions the row map (:func:`row_map_name`)
    #: gives for each row ("" when the rows are those chunks in order, or no map was recorded).
    chunks_digest: str = ""


class CacheDamaged(Exception):
    """A persisted index failed verification; the message says which check."""


class BuildReport(BaseModel):
    """What :func:`ensure_index` did (reused, refreshed, extended, updated or built) and how many chunks it embedded."""

    action: str
    embedder: str
    chunks: int
    embedded: int
    reused: int
    index_kind: str
    path: str
    seconds: float
    warning: str | None = None
    resumed: int = 0  # chunks whose vectors an interrupted build had already saved


def _slug(text: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60]
    return f"{clean}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def content_key(content_hash: str, embedder_name: str, dim: int) -> str:
    """``sha256(format version, embedder, dim, content hash)``, 32 hex digits: the folder of one library content."""
    text = f"{FORMAT_VERSION}\0{embedder_name}\0{dim}\0{content_hash}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def store_dir(cache_dir: Path, content_hash: str, embedder: Embedder) -> Path:
    """The folder holding the index of this library content for this embedder (independent of where the library lives)."""
    return cache_dir / _slug(embedder.name) / content_key(content_hash, embedder.name, embedder.dim)


@dataclass(frozen=True)
class LoadedIndex:
    """A usable index: the vector index, the chunk id of each row and the metadata."""

    index: VectorIndex
    chunk_ids: Sequence[str]
    meta: IndexMeta
    #: the text digest of each row's chunk, when known (reuse checks them, not only the ids)
    digests: Sequence[str] = ()
    #: row i holds chunk i of the chunk list it was loaded for (the engine's row maps are then the identity)
    rows_are_chunks: bool = False
    #: each row's position in the chunk list it was loaded or built for (-1: a dead row, an edited or removed chunk's),
    #: when the rows are not those chunks in order; the engine's row maps are then this array
    row_chunks: np.ndarray | None = None

    @property
    def vectors(self) -> np.ndarray:
        """The row vectors (the index's own memory, not a copy)."""
        return self.index.vectors


def row_map_name(chunks_digest: str) -> str:
    """The file of a build's row map for the chunks whose :func:`rows_digest` is ``chunks_digest``."""
    return f"{ROW_CHUNKS_PREFIX}{chunks_digest.rpartition(':')[2][:32]}.npy"


class _MapUnusable(Exception):
    """A build's row map is missing, damaged or not for these chunks: the rows are read and matched instead (the
    index and the rows file were verified; only the shortcut is lost)."""


def _read_meta(folder: Path) -> IndexMeta | None:
    try:
        return IndexMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CacheDamaged(f"meta.json is unreadable ({type(exc).__name__})") from None


def _matches(path: Path, expected: str | None) -> bool:
    """Whether the file's checksum is ``expected``: XXH3-128 when the value names it, else (a format-3 build)
    SHA-256, the only other algorithm a build was ever written with; raises ``OSError`` as reading does.  Not read
    again while the file is as it was when last found to match (:mod:`incidentlib.verified_memo`)."""
    return verified_memo.file_matches(path, expected, _file_checksum)


def _file_checksum(path: Path, expected: str) -> str | None:
    """The file's checksum by the algorithm ``expected`` names (None for a value of neither kind)."""
    if expected.startswith(f"{checksum.ALGORITHM}:"):
        return checksum.checksum_file(path)
    if not _SHA256_HEX.match(expected):
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(checksum.READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _verify_files(folder: Path, meta: IndexMeta, names: Sequence[str]) -> None:
    """Each named file of ``meta``'s build matches its recorded checksum; :class:`CacheDamaged` names one that does not."""
    build = folder / meta.build
    for name in names:
        try:
            matches = _matches(build / name, meta.checksums.get(name))
        except OSError:
            raise CacheDamaged(f"{meta.build}/{name} is missing or unreadable") from None
        if not matches:
            raise CacheDamaged(f"{meta.build}/{name} does not match its checksum")


def _open_build(folder: Path, meta: IndexMeta) -> VectorIndex:
    """The verified index of ``meta``'s build (``meta.chunks`` rows of the embedder's width); its rows file is checked
    against its checksum, not read.  :class:`CacheDamaged` names the failed check."""
    if not _BUILD_NAME.match(meta.build):
        raise CacheDamaged(f"meta.json names an invalid build folder {meta.build[:40]!r}")
    _verify_files(folder, meta, (ROWS_FILE, *dense.files_for(meta.index_kind)))  # a damaged rows file is found here
    try:
        index = dense.load(folder / meta.build, meta.index_kind)
        vectors = index.vectors
    except (OSError, ValueError, RuntimeError) as exc:
        raise CacheDamaged(f"{meta.build} cannot be read ({type(exc).__name__})") from None
    if vectors.ndim != 2 or vectors.dtype != np.float32 or vectors.shape != (meta.chunks, meta.dim):
        raise CacheDamaged(f"the index holds vectors of shape {vectors.shape} {vectors.dtype}, "
                           f"expected ({meta.chunks}, {meta.dim}) float32")
    # vectors on disk were checked finite when written and their file matched its checksum above; scanning them
    # again would page the whole file into memory at every start
    if not dense.vectors_on_disk(meta.index_kind) and not np.isfinite(vectors).all():
        raise CacheDamaged("the index holds NaN or infinite values")
    if len(index) != meta.chunks:
        raise CacheDamaged(f"{len(index)} vectors where meta.json says {meta.chunks}")
    return index


def _read_build(folder: Path, meta: IndexMeta, chunks: Sequence[Chunk]) -> LoadedIndex:
    """``meta``'s build, whose rows are ``chunks`` in order (their :func:`rows_digest` is the build's)."""
    return LoadedIndex(_open_build(folder, meta), chunk_ids(chunks), meta, chunk_digests(chunks), rows_are_chunks=True)


def _read_row_map(folder: Path, meta: IndexMeta, chunks: Sequence[Chunk]) -> np.ndarray:
    """The verified row map of ``meta``'s build for ``chunks`` (the chunks' :func:`rows_digest` is the build's
    ``chunks_digest``); :class:`_MapUnusable` when it cannot be used."""
    name = row_map_name(meta.chunks_digest)
    try:
        _verify_files(folder, meta, (name,))
        row_chunks: np.ndarray = np.load(folder / meta.build / name, allow_pickle=False)
    except (CacheDamaged, OSError, ValueError) as exc:
        raise _MapUnusable(str(exc)) from None
    if (row_chunks.dtype != np.int64 or row_chunks.shape != (meta.chunks,)
            or not _covers_each_once(row_chunks, len(chunks))):
        raise _MapUnusable(f"{meta.build}/{name} does not give each of the {len(chunks)} chunks one row")
    return row_chunks


def _mapped(index: VectorIndex, chunks: Sequence[Chunk], meta: IndexMeta, row_chunks: np.ndarray) -> LoadedIndex:
    """A build whose row ``i`` holds ``chunks[row_chunks[i]]`` (a dead row, -1, names no chunk: id and digest "")."""
    return LoadedIndex(index, GatheredRows(chunk_ids(chunks), row_chunks, fill=""), meta,
                       GatheredRows(chunk_digests(chunks), row_chunks, fill=""), row_chunks=row_chunks)


def _covers_each_once(row_chunks: np.ndarray, count: int) -> bool:
    """Whether the rows name each of ``count`` chunks exactly once, every other row being dead (-1)."""
    if len(row_chunks) < count:
        return False
    if len(row_chunks) == 0:
        return True
    if int(row_chunks.min()) < -1 or int(row_chunks.max()) >= count:
        return False
    live = row_chunks[row_chunks >= 0]
    return len(live) == count and bool((np.bincount(live, minlength=count) == 1).all())


def _rows_of_distinct(row_of_chunk: np.ndarray, rows: int) -> bool:
    """Whether every chunk has a row (of ``rows``) and no two share one."""
    if len(row_of_chunk) == 0:
        return True
    if int(row_of_chunk.min()) < 0:
        return False
    return bool((np.bincount(row_of_chunk, minlength=rows) <= 1).all())


def _read_keys(folder: Path, meta: IndexMeta) -> RowKeys:
    """The :class:`~.row_keys.RowKeys` of ``meta``'s rows file, read :data:`ROW_BLOCK` lines at a time (the file
    matched its checksum in :func:`_open_build`); :class:`CacheDamaged` names the first line that is not a row."""
    parts: list[RowKeys] = []
    number = 0
    try:
        with (folder / meta.build / ROWS_FILE).open(encoding="utf-8") as handle:
            while lines := [line.rstrip("\n") for line in itertools.islice(handle, ROW_BLOCK)]:
                ids, digests = _row_columns(lines, number)
                keys = RowKeys.of(ids, digests)
                if keys is None:
                    raise CacheDamaged(f"{ROWS_FILE} holds a digest that is not {DIGEST_DIGITS} hex digits "
                                       f"(lines {number + 1}-{number + len(lines)})")
                parts.append(keys)
                number += len(lines)
    except (OSError, UnicodeDecodeError) as exc:
        raise CacheDamaged(f"{meta.build}/{ROWS_FILE} cannot be read ({type(exc).__name__})") from None
    if number != meta.chunks:
        raise CacheDamaged(f"{number} rows where meta.json says {meta.chunks}")
    return RowKeys.concatenate(parts)


def _row_columns(lines: list[str], before: int = 0) -> tuple[list[str], list[str]]:
    """The chunk id and digest of every row; :class:`CacheDamaged` names the first line that is not a row (counting
    ``before`` lines read earlier).

    The lines are decoded as one JSON array (one C-level call instead of one per line: the per-line calls were a
    third of loading a 134k-row index); when the array does not decode to one value per line, every line is
    checked on its own, which names the bad one."""
    values: object = None
    with contextlib.suppress(ValueError):  # e.g. a blank or cut line: found and named below
        values = json.loads("[" + ",".join(lines) + "]")
    if not isinstance(values, list) or len(values) != len(lines):
        values = [None] * len(lines)  # checked line by line below
    ids: list[str] = []
    digests: list[str] = []
    for number, (line, value) in enumerate(zip(lines, values, strict=True), before + 1):
        if not (isinstance(value, dict) and type(value.get("id")) is str and type(value.get("digest")) is str
                and type(value.get("incident")) is str):
            try:
                value = _parse_row(line)
            except ValueError:
                raise CacheDamaged(f"{ROWS_FILE} line {number} is not a row with string id, digest and incident") from None
        ids.append(value["id"])
        digests.append(value["digest"])
    return ids, digests


def _record_row_order(folder: Path, meta: IndexMeta, row_chunks: np.ndarray | None, chunks_digest: str) -> IndexMeta:
    """Record how the verified rows of ``meta``'s build (read row by row) stand to the chunks, so the next start with
    these chunks need not read them: the rows digest when they are the chunks in order, else the chunks' digest and
    the row map (:func:`row_map_name`).  A cache that cannot be written keeps serving as it is."""
    if row_chunks is None:
        update: dict[str, object] = {"rows_digest": chunks_digest}
    else:
        path = folder / meta.build / row_map_name(chunks_digest)
        payload = io.BytesIO()
        np.save(payload, row_chunks, allow_pickle=False)
        try:
            atomic_write_bytes(path, payload.getvalue())
        except OSError:
            return meta
        update = {"chunks_digest": chunks_digest, "checksums": {**meta.checksums, path.name: checksum.checksum_file(path)}}
    updated = meta.model_copy(update=update)
    with contextlib.suppress(OSError):
        atomic_write_text(folder / "meta.json", updated.model_dump_json(indent=2))
    return updated


def _touch(folder: Path) -> None:
    with contextlib.suppress(OSError):  # a read-only cache still serves
        os.utime(folder / "meta.json")  # last use: the eviction order of KEEP_BUILDS


def _donor(folder: Path, embedder: Embedder, library: str) -> tuple[Path, IndexMeta] | None:
    """A sibling build to take unchanged vectors from: the same library directory's, else the most recently used."""
    found: list[tuple[bool, float, Path, IndexMeta]] = []
    parent = folder.parent
    if not parent.is_dir():
        return None
    for sibling in parent.iterdir():
        if sibling == folder or not sibling.is_dir():
            continue
        try:
            meta = _read_meta(sibling)
            used = (sibling / "meta.json").stat().st_mtime
        except (CacheDamaged, OSError):
            continue
        if meta is None or meta.format_version not in DONOR_FORMATS or meta.embedder != embedder.name or meta.dim != embedder.dim:
            continue
        found.append((bool(library) and meta.library == library, used, sibling, meta))
    if not found:
        return None
    _, _, path, meta = max(found, key=lambda item: (item[0], item[1]))
    return path, meta


@dataclass
class _Donor:
    """Vectors a build may keep: an index (an earlier build's on disk, ``path``, or one held in memory) and its rows'
    keys, with the row each key names when not its own number (an index in memory skips its dead rows)."""

    index: VectorIndex
    keys: RowKeys
    rows: np.ndarray | None = None  # row of key i, when not i
    path: tuple[Path, IndexMeta] | None = None

    @classmethod
    def in_memory(cls, index: VectorIndex, keys: RowKeys, live: np.ndarray) -> _Donor:
        rows = np.flatnonzero(live)
        return cls(index, keys.take(rows), rows)

    def rows_for(self, wanted: RowKeys) -> np.ndarray:
        """For each wanted key, the donor row holding its vector, or -1."""
        found = match(self.keys, wanted)
        if self.rows is not None:
            found = np.where(found >= 0, self.rows[np.maximum(found, 0)], -1)
        return found

    def copy_rows(self, rows: np.ndarray, into: np.ndarray, at: np.ndarray) -> None:
        """``into[at] = vectors of rows``, :data:`ROW_BLOCK` rows at a time, read through the index (a carried
        index serves its base's rows and its appended ones without making one matrix of both)."""
        for start in range(0, len(rows), ROW_BLOCK):
            into[at[start:start + ROW_BLOCK]] = self.index.rows(rows[start:start + ROW_BLOCK])


def ensure_index(
    chunks: Sequence[Chunk],
    content_hash: str,
    embedder: Embedder,
    folder: Path,
    hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
    batch_size: int = EMBED_BATCH,
    ivf_threshold: int = DEFAULT_IVF_THRESHOLD,
    progress: ProgressFn | None = None,
    library: str = "",
    memory_donor: tuple[VectorIndex, RowKeys, np.ndarray] | None = None,
    segment: int = RESUME_SEGMENT,
    chunks_digest: str | None = None,
    rebuild: bool = False,
) -> tuple[LoadedIndex, BuildReport]:
    """Return a fresh index for ``chunks``, building or updating the persisted one as needed.

    ``folder`` is :func:`store_dir` of the content; ``library`` (the library's directory) only
    helps pick a donor of unchanged vectors.  Index rows need not follow the library's chunk
    order: ``LoadedIndex.chunk_ids`` names the chunk in each row, so new chunks can be appended.
    ``memory_donor`` (an index, the key of each row and whether it is live, :mod:`.row_keys`) is an
    index held in memory (a carried one, :mod:`.layered`, being compacted): the vectors a donor on disk
    lacks are read from it, not embedded again.  An HNSW graph or inverted file on disk is then extended
    with them as after any change; otherwise the persisted index is written anew from both.

    ``chunks_digest``: :func:`rows_digest` of ``chunks`` when the caller has it (computed otherwise).

    ``rebuild``: build the index again even when one for these chunks exists, from the vectors it (or a donor)
    holds, without dead rows and with an inverted file's lists trained again; nothing held is embedded again.

    Rows are matched by :class:`~.row_keys.RowKeys` (two words a row, sorted and looked up in bulk), never as
    Python objects per row: at 1M incidents (13.5M chunks) those would not fit in memory.

    Embedding is checkpointed every ``segment`` chunks into ``folder/.partial/``; a build that was
    interrupted (Ctrl-C, a killed process) takes those vectors back on its next run and embeds only
    the rest (``BuildReport.resumed``).
    """
    started = time.perf_counter()
    warning: str | None = None
    expected_kind = dense.kind_for(len(chunks), hnsw_threshold, ivf_threshold)
    digest_of_chunks = chunks_digest or rows_digest(chunk_ids(chunks), chunk_digests(chunks))
    current: tuple[VectorIndex, RowKeys] | None = None
    try:
        meta = _read_meta(folder)
        usable = meta is not None and meta.format_version == FORMAT_VERSION
        same = (meta is not None and usable and meta.embedder == embedder.name and meta.dim == embedder.dim
                and meta.content_hash == content_hash and meta.index_kind == expected_kind)
        if not rebuild and same and meta is not None and meta.chunks == len(chunks) and meta.rows_digest == digest_of_chunks:
            # the rows are these chunks in this order: reused without reading, parsing and matching 1M+ rows
            reused = _read_build(folder, meta, chunks)
            _touch(folder)
            return reused, _report("reused", meta, 0, len(chunks), folder, started, chunks=len(chunks))
        if usable and meta is not None:
            index = _open_build(folder, meta)
            if not rebuild and same and meta.chunks_digest == digest_of_chunks:
                try:  # these chunks in the order its row map records
                    loaded = _mapped(index, chunks, meta, _read_row_map(folder, meta, chunks))
                except _MapUnusable as exc:
                    log.info("the row map of %s is not used (%s); reading its rows", folder, exc)
                else:
                    _touch(folder)
                    return loaded, _report("reused", meta, 0, len(chunks), folder, started, chunks=len(chunks))
            current = index, _read_keys(folder, meta)
    except CacheDamaged as exc:
        warning = f"index cache {folder} was damaged ({exc}); rebuilt it"
        log.warning(warning)
        meta, current, same = None, None, False
    wanted = RowKeys.of_chunks(chunks)
    if not rebuild and same and current is not None and meta is not None:
        row_of_chunk = match(current[1], wanted)
        if _rows_of_distinct(row_of_chunk, meta.chunks):  # the same chunks, in its own order (and dead rows)
            identity = meta.chunks == len(chunks) and bool(np.array_equal(row_of_chunk, np.arange(len(chunks))))
            row_chunks = None if identity else _inverse(row_of_chunk, size=meta.chunks)
            meta = _record_row_order(folder, meta, row_chunks, digest_of_chunks)
            _touch(folder)
            loaded = (_read_build(folder, meta, chunks) if row_chunks is None
                      else _mapped(current[0], chunks, meta, row_chunks))
            return loaded, _report("reused", meta, 0, len(chunks), folder, started, chunks=len(chunks))

    # where each chunk's vector can come from: a build on disk (one of the same content with another index kind, else
    # a sibling's), then an index held in memory (a carried one being compacted); the rest is embedded
    disk: _Donor | None = None
    if current is not None and meta is not None and meta.embedder == embedder.name and meta.dim == embedder.dim:
        disk = _Donor(current[0], current[1], path=(folder, meta))  # the same content with another kind or chunking
    elif not warning and (memory_donor is None or expected_kind in ("hnsw", "ivf")):
        # (a carried index being compacted into an exact one has every vector in memory: no disk donor to read)
        found = _donor(folder, embedder, library)
        if found is not None:
            try:
                disk = _Donor(_open_build(*found), _read_keys(*found), path=found)
            except (CacheDamaged, OSError, ValueError):
                disk = None  # a damaged donor only costs re-embedding
    memory = _Donor.in_memory(*memory_donor) if memory_donor is not None else None
    donors = [donor for donor in (disk, memory) if donor is not None]
    source = np.full(len(chunks), -1, dtype=np.int64)  # which donor holds the chunk's vector
    source_row = np.full(len(chunks), -1, dtype=np.int64)  # and in which of its rows
    for number, donor in enumerate(donors):
        open_positions = np.flatnonzero(source < 0)
        donor_rows = donor.rows_for(wanted.take(open_positions))
        hit = donor_rows >= 0
        source[open_positions[hit]], source_row[open_positions[hit]] = number, donor_rows[hit]
    missing = np.flatnonzero(source < 0)  # embedded now
    on_disk = np.flatnonzero(source == 0) if disk is not None else np.zeros(0, dtype=np.int64)
    disk_rows = len(disk.keys) if disk is not None else 0
    dead = disk_rows - len(on_disk)  # the disk donor's rows no chunk asks for any more (edited, removed, dead already)
    additions_only = disk is not None and 0 < disk_rows == len(on_disk)
    donor_path = disk.path if disk is not None else None

    # an HNSW graph or trained lists on disk to keep, and few enough dead rows: the donor's rows stay (those of edited
    # or removed chunks dead) and the other chunks are appended (incremental add)
    extend = (not rebuild and disk is not None and donor_path is not None and bool(len(on_disk))
              and dead <= MAX_DEAD_SHARE * (len(chunks) + dead)  # the grown index: every chunk's row and the dead ones
              and disk.index.kind == expected_kind and expected_kind in ("hnsw", "ivf"))
    donor_rows_file: BinaryIO | None = None
    if extend and donor_path is not None:
        try:  # opened now: another process may remove the donor's folder while the new chunks are embedded
            donor_rows_file = (donor_path[0] / donor_path[1].build / ROWS_FILE).open("rb")
        except OSError:
            extend = False
    if extend and disk is not None and donor_path is not None and donor_rows_file is not None:
        with donor_rows_file:
            return _extended(chunks, disk, memory, source, source_row, on_disk, dead, donor_rows_file, donor_path,
                             digest_of_chunks, content_hash, embedder, folder, batch_size, segment, progress, started,
                             warning, library, expected_kind)

    # an inverted file's rows are assembled in its own vectors file, mapped, in the staging folder the build is
    # written to: at 1M incidents they are 27.5 GB, more than the machine's memory, and the index is then built
    # over the file a block at a time and saved beside it without another copy (:meth:`.ivf.IvfIndex.build`)
    staging = _staging_folder(folder) if expected_kind == "ivf" else None
    with _removed_on_failure(staging):
        vectors = (np.lib.format.open_memmap(staging / IVF_VECTORS_FILE, mode="w+", dtype=np.float32,
                                             shape=(len(chunks), embedder.dim))
                   if staging is not None else np.zeros((len(chunks), embedder.dim), dtype=np.float32))
        for number, donor in enumerate(donors):  # kept vectors copied a block at a time
            kept = np.flatnonzero(source == number)
            donor.copy_rows(source_row[kept], vectors, kept)
        del donors, disk, memory  # the donors' memory is not needed any more

        def into_vectors(at: np.ndarray, fresh: np.ndarray) -> None:
            vectors[missing[at]] = fresh

        resumed = _embed_resumably(chunks, missing, embedder, folder, batch_size, segment, progress, into_vectors)
        if staging is not None:
            assert isinstance(vectors, np.memmap)
            vectors.flush()
            vectors = np.load(staging / IVF_VECTORS_FILE, mmap_mode="r", allow_pickle=False)
        index = dense.create(vectors, hnsw_threshold, ivf_threshold, progress)  # an inverted file reports its rows added
    if memory_donor is not None:
        action = "compacted"
    elif not len(missing):
        action = "refreshed"
    elif additions_only:
        action = "extended"  # the exact index is its vectors: the new rows are added to the reused ones
    elif len(missing) < len(chunks):
        action = "updated"
    else:
        action = "built"
    return _finish(action, index, _Rows(chunks, None, digest_of_chunks), content_hash, embedder, folder, len(missing),
                   started, warning, library, donor_path, resumed, staging)


def _extended(chunks: Sequence[Chunk], disk: _Donor, memory: _Donor | None, source: np.ndarray,
              source_row: np.ndarray, on_disk: np.ndarray, dead: int, donor_rows_file: BinaryIO,
              donor_path: tuple[Path, IndexMeta], digest_of_chunks: str, content_hash: str, embedder: Embedder,
              folder: Path, batch_size: int, segment: int, progress: ProgressFn | None, started: float,
              warning: str | None, library: str, expected_kind: str) -> tuple[LoadedIndex, BuildReport]:
    """:func:`ensure_index`'s incremental add: the disk donor's HNSW graph or inverted file keeps its rows (those no
    chunk asks for dead) and gets the other chunks appended, their vectors from ``memory`` or embedded now."""
    missing = np.flatnonzero(source < 0)
    disk_rows = len(disk.keys)
    appended = np.flatnonzero(source != 0)
    fresh = np.zeros((len(appended), embedder.dim), dtype=np.float32)
    if memory is not None:  # vectors carried in memory: copied, not embedded again
        from_memory = np.flatnonzero(source[appended] == 1)
        memory.copy_rows(source_row[appended[from_memory]], fresh, from_memory)
    embed_at = np.flatnonzero(source[appended] < 0)  # where in ``appended`` the embedded chunks go

    def into_fresh(at: np.ndarray, vectors: np.ndarray) -> None:
        fresh[embed_at[at]] = vectors

    resumed = _embed_resumably(chunks, missing, embedder, folder, batch_size, segment, progress, into_fresh)
    row_chunks = np.concatenate([_inverse(source_row[on_disk], on_disk, disk_rows), appended])
    staging = None
    if expected_kind == "ivf":
        from .ivf import IvfIndex  # FAISS is loaded already: the donor is an inverted file

        assert isinstance(disk.index, IvfIndex)
        # the grown rows written into the new build's own file, not appended in memory (:meth:`.ivf.IvfIndex.add`)
        staging = _staging_folder(folder)
        with _removed_on_failure(staging):
            index = disk.index.add(fresh, rows_file=staging / IVF_VECTORS_FILE)
    else:
        index = disk.index.add(fresh)
    action = ("compacted" if memory is not None else "updated" if dead else "extended" if len(appended)
              else "refreshed")
    rows = _Rows(chunks, row_chunks, digest_of_chunks, copied=donor_rows_file, appended=appended)
    return _finish(action, index, rows, content_hash, embedder, folder, len(missing), started, warning, library,
                   donor_path, resumed, staging)


def _inverse(positions: np.ndarray, values: np.ndarray | None = None, size: int | None = None) -> np.ndarray:
    """The array ``out`` with ``out[positions[i]] = values[i]`` (``values`` defaults to ``0 .. n - 1``) and -1
    elsewhere."""
    out = np.full(len(positions) if size is None else size, -1, dtype=np.int64)
    out[positions] = np.arange(len(positions), dtype=np.int64) if values is None else values
    return out


def _staging_folder(folder: Path) -> Path:
    """A new hidden folder in ``folder`` that a build is written to before it is renamed into place, named after this
    process (``.build-<pid>-…``) so that one a killed build left behind can be told apart (:func:`_remove_orphans`)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=folder))


@contextlib.contextmanager
def _removed_on_failure(staging: Path | None) -> Iterator[None]:
    """Remove the staging folder ``staging`` (if any) when the block raises: nothing half-written stays behind."""
    try:
        yield
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def _remove_orphans(folder: Path) -> None:
    """Remove the staging folders in ``folder`` of processes that no longer run and untouched for
    :data:`ORPHAN_AGE_S`: a build killed while it wrote (at 1M incidents, 27.5 GB of rows) would otherwise stay on
    disk for good.  A folder of a live process is another build still being written, and is left alone; so is one
    whose name holds no process id, or written to recently (its process may run where this one cannot see it, in
    another container sharing the cache)."""
    if os.name != "posix":
        return  # whether a process runs is asked with signal 0, which elsewhere is no such question
    now = time.time()
    for staging in folder.glob(f"{STAGING_PREFIX}*"):
        owner = staging.name[len(STAGING_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        try:
            touched = max(entry.stat().st_mtime for entry in (staging, *staging.iterdir()))
            if now - touched < ORPHAN_AGE_S:
                continue
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(staging, ignore_errors=True)
        except OSError:
            continue  # it runs under another user (alive), or the folder went away meanwhile


def _saved_segments(partial: Path, dim: int) -> dict[str, np.ndarray]:
    """Vectors saved by an interrupted build, by ``id\0digest``; a damaged or foreign segment is skipped."""
    found: dict[str, np.ndarray] = {}
    for path in sorted(partial.glob("segment-*.npz")):
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys, vectors = saved["keys"], saved["vectors"]
        except (OSError, ValueError, KeyError):
            log.warning("skipping unreadable checkpoint %s", path)
            continue
        if vectors.ndim != 2 or vectors.shape != (len(keys), dim) or vectors.dtype != np.float32 or not np.isfinite(vectors).all():
            log.warning("skipping checkpoint %s: not %d-dimensional finite float32 rows", path, dim)
            continue
        found.update(zip((str(key) for key in keys), vectors, strict=True))
    return found


#: ``sink(at, vectors)``: the vectors of the chunks ``positions[at]`` of a build, as they are embedded or resumed.
VectorSink = Callable[[np.ndarray, np.ndarray], None]


def _embed_resumably(chunks: Sequence[Chunk], positions: np.ndarray, embedder: Embedder, folder: Path,
                     batch_size: int, segment: int, progress: ProgressFn | None, sink: VectorSink) -> int:
    """Embed the chunks at ``positions`` of ``chunks``, handing each block of vectors to ``sink``; returns how many
    came from an interrupted build's checkpoints.

    The rest is embedded ``segment`` chunks at a time, each segment saved (temporary file, then rename)
    before the next starts, so an interruption loses at most one segment.  Nothing here holds a vector or a chunk
    object per row: a build of 13.5M chunks passes them to ``sink`` (the build's own mapped file) a segment at a time.
    """
    ids, digests, texts = chunk_ids(chunks), chunk_digests(chunks), chunk_texts(chunks)

    def keys(at: np.ndarray) -> np.ndarray:
        return np.array([f"{ids[p]}\0{digests[p]}" for p in positions[at].tolist()], dtype=np.str_)

    partial = folder / PARTIAL_DIR
    saved = _saved_segments(partial, embedder.dim) if partial.is_dir() and len(positions) else {}
    todo = np.arange(len(positions))
    if saved:  # checked a segment of keys at a time: the keys of 13.5M chunks at once would be gigabytes
        have = np.zeros(len(positions), dtype=bool)
        for start in range(0, len(positions), segment):
            at = np.arange(start, min(start + segment, len(positions)))
            block = [str(key) for key in keys(at)]
            found = np.fromiter((key in saved for key in block), dtype=bool, count=len(block))
            if found.any():
                sink(at[found], np.stack([saved[key] for key, hit in zip(block, found.tolist(), strict=True) if hit]))
            have[at] = found
        todo = np.flatnonzero(~have)
        del saved
    resumed = len(positions) - len(todo)
    if progress:
        progress(0, len(todo))
    for start in range(0, len(todo), segment):
        at = todo[start : start + segment]

        def step(done: int, _total: int, offset: int = start) -> None:
            if progress:
                progress(offset + done, len(todo))

        vectors = embed_texts([texts[p] for p in positions[at].tolist()], embedder, batch_size, step)
        sink(at, vectors)
        if len(todo) > segment:  # a build of one segment has nothing to resume
            partial.mkdir(parents=True, exist_ok=True)
            staging = partial / f".segment-{start:09d}.npz"
            with staging.open("wb") as handle:
                np.savez(handle, keys=keys(at), vectors=vectors)
            staging.rename(partial / f"segment-{start:09d}-{os.getpid()}.npz")
    return resumed


@dataclass(frozen=True)
class _Rows:
    """The rows of a new build: ``chunks`` in order (``order`` None), or row ``i`` holds ``chunks[order[i]]``; its
    rows file is then ``copied`` (the donor's rows file) followed by the rows of the chunks ``appended``."""

    chunks: Sequence[Chunk]
    order: np.ndarray | None
    chunks_digest: str
    copied: BinaryIO | None = None  # opened before the embedding: the donor's folder may be removed meanwhile
    appended: np.ndarray | None = None


def _finish(action: str, index: VectorIndex, rows: _Rows, content_hash: str,
            embedder: Embedder, folder: Path, embedded: int, started: float,
            warning: str | None, library: str, donor: tuple[Path, IndexMeta] | None,
            resumed: int = 0, staging: Path | None = None) -> tuple[LoadedIndex, BuildReport]:
    chunks, order = rows.chunks, rows.order
    if order is not None and bool(np.array_equal(order, np.arange(len(order)))):
        order = None  # the new rows came last in the chunks' order too: the rows are the chunks in order
    meta = IndexMeta(
        format_version=FORMAT_VERSION,
        embedder=embedder.name,
        dim=embedder.dim,
        content_hash=content_hash,
        chunks=len(chunks) if order is None else len(order),  # the rows, dead ones included
        index_kind=index.kind,
        build=f"build-{content_hash[:16]}-{int(time.time() * 1000)}",
        built_at=time.time(),
        embedded_now=embedded - resumed,
        reused=len(chunks) - embedded,
        resumed=resumed,
        library=library,
        # the rows' own digest when they are the chunks in order; a build in another order is found by its row map
        rows_digest=rows.chunks_digest if order is None else "",
        chunks_digest="" if order is None else rows.chunks_digest,
    )
    meta = _write_build(folder, meta, rows, order, index, staging)  # removes the staging folder if it fails
    shutil.rmtree(folder / PARTIAL_DIR, ignore_errors=True)  # the build is whole: its checkpoints are not needed
    if donor is not None and donor[0] != folder and library and donor[1].library == library:
        shutil.rmtree(donor[0], ignore_errors=True)  # superseded: the same directory's earlier content
    _evict(folder.parent)
    loaded = (LoadedIndex(index, chunk_ids(chunks), meta, chunk_digests(chunks), rows_are_chunks=True)
              if order is None else _mapped(index, chunks, meta, order))
    report = _report(action, meta, embedded - resumed, len(chunks) - embedded, folder, started, warning, len(chunks))
    return loaded, report.model_copy(update={"resumed": resumed})


def _evict(parent: Path, keep: int = KEEP_BUILDS) -> None:
    """Remove all but the ``keep`` most recently used content folders of one embedder."""
    folders = []
    for sibling in parent.iterdir():
        try:
            folders.append(((sibling / "meta.json").stat().st_mtime, sibling))
        except OSError:
            continue  # a folder being written right now has no meta.json yet
    for _, stale in sorted(folders, reverse=True)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)


def embed_texts(texts: list[str], embedder: Embedder, batch_size: int, progress: ProgressFn | None) -> np.ndarray:
    """``texts`` embedded as documents in batches of ``batch_size`` (float32, one row per text)."""
    parts = []
    done = 0
    if progress:
        progress(0, len(texts))
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        parts.append(embedder.encode_documents(batch))
        done += len(batch)
        if progress:
            progress(done, len(texts))
    return np.vstack(parts).astype(np.float32, copy=False) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def _row_lines(chunks: Sequence[Chunk], positions: np.ndarray | None) -> Iterator[str]:
    """The rows file's lines for ``chunks`` (all, in order, or those at ``positions``), :data:`ROW_BLOCK` at a time;
    each line is what ``json.dumps(index_row(chunk))`` gives, made from the chunk columns without a chunk object."""
    ids, digests, incidents = chunk_ids(chunks), chunk_digests(chunks), chunk_incident_ids(chunks)
    quote = json.encoder.encode_basestring_ascii  # json.dumps's own string encoder (C)
    if positions is None:  # every row: the columns' own iterators (slicing a spliced column searches each row)
        every = zip(ids, digests, incidents, strict=True)
        blocks: Iterator[list[tuple[str, str, str]]] = iter(lambda: list(itertools.islice(every, ROW_BLOCK)), [])
    else:
        blocks = (list(zip(map(ids.__getitem__, at), map(digests.__getitem__, at), map(incidents.__getitem__, at),
                           strict=True))
                  for at in (positions[start:start + ROW_BLOCK].tolist() for start in range(0, len(positions), ROW_BLOCK)))
    for block in blocks:
        yield "".join(f'{{"id": {quote(i)}, "digest": {quote(d)}, "incident": {quote(n)}}}\n' for i, d, n in block)


def _write_rows(path: Path, rows: _Rows) -> None:
    with path.open("wb") as handle:
        if rows.copied is not None:  # the donor's rows, unchanged: copied as bytes, not parsed and written again
            rows.copied.seek(0)
            shutil.copyfileobj(rows.copied, handle, checksum.READ_BLOCK)
        for lines in _row_lines(rows.chunks, rows.appended if rows.copied is not None else None):
            handle.write(lines.encode("utf-8"))


def _write_build(folder: Path, meta: IndexMeta, rows: _Rows, order: np.ndarray | None, index: VectorIndex,
                 staging: Path | None = None) -> IndexMeta:
    """Write the build into ``staging`` (a folder of :func:`_staging_folder`, new unless the index's files are
    already being written there), rename it into place, then point ``meta.json`` at it."""
    staging = staging or _staging_folder(folder)
    with _removed_on_failure(staging):
        _write_rows(staging / ROWS_FILE, rows)
        names = [ROWS_FILE, *index.save(staging)]
        if order is not None:
            names.append(row_map_name(meta.chunks_digest))
            np.save(staging / names[-1], order, allow_pickle=False)
        meta = meta.model_copy(update={"checksums": {name: checksum.checksum_file(staging / name) for name in names}})
        staging.rename(folder / meta.build)
    atomic_write_text(folder / "meta.json", meta.model_dump_json(indent=2))
    for old in folder.glob("build-*"):
        if old.name != meta.build:
            shutil.rmtree(old, ignore_errors=True)
    _remove_orphans(folder)
    return meta


def _report(action: str, meta: IndexMeta, embedded: int, reused: int, folder: Path, started: float,
            warning: str | None = None, chunks: int | None = None) -> BuildReport:
    """``chunks``: the chunks indexed (``meta.chunks`` counts the rows, dead ones included)."""
    return BuildReport(
        action=action,
        embedder=meta.embedder,
        chunks=meta.chunks if chunks is None else chunks,
        embedded=embedded,
        reused=reused,
        index_kind=meta.index_kind,
        path=str(folder),
        seconds=round(time.perf_counter() - started, 3),
        warning=warning,
    )
