"""Persisted dense indexes: keyed by content, self-describing, reused when fresh, rebuilt when stale.

Layout under the cache directory::

    <cache>/<embedder slug>/<content key>/
        meta.json                 format version, embedder, dim, content hash, index kind, checksums
        build-<hash>/             one complete build
            chunks.jsonl          chunk id, digest and incident of every row, in row order
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
order (at 1.35M rows, parsing the file and matching its rows against the chunks was most of the index's load).  Any other build is
read and matched row by row, as before the digest existed.

When the library changes, its content key changes too; the build for the new key takes the
vectors of unchanged chunks (same id and text digest) from a *donor*: the build made from the
same library directory before (recorded in ``meta.json``), else the most recently used build
of the same embedder.  Only new or edited chunks are embedded.  When nothing was edited or
removed, an HNSW index is extended with the new rows (incremental add); otherwise the index is
rebuilt from the reused and new vectors.  The donor of the same directory is then removed
(superseded), and at most ``KEEP_BUILDS`` content folders are kept per embedder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
import xxhash
from pydantic import BaseModel

from .. import checksum, verified_memo
from ..embeddings import Embedder
from ..row_sequence import LineColumn
from ..storage import atomic_write_text
from . import dense
from .chunks import Chunk, chunk_digests, chunk_ids
from .dense import DEFAULT_HNSW_THRESHOLD, DEFAULT_IVF_THRESHOLD, ProgressFn, VectorIndex

#: On-disk layout version; a different number means "rebuild" (2: meta.json holds a checksum per build file;
#: 3: folders keyed by content, the exact index is vectors.npy alone, an HNSW index holds its vectors;
#: 4: the checksums are XXH3-128 (:mod:`incidentlib.checksum`), SHA-256 before).
FORMAT_VERSION = 4
#: Formats whose builds are still read as donors of their vectors: format 3 differs only in its checksums (verified
#: with the SHA-256 they name), so moving to format 4 rewrites the index files and embeds nothing.
DONOR_FORMATS = frozenset({3, FORMAT_VERSION})
#: Texts per embedder call while building: amortises the call overhead and keeps progress updates frequent.
EMBED_BATCH = 64
ROWS_FILE = "chunks.jsonl"
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
    hasher.update(_joined_lines(ids))
    hasher.update(b"\0")
    hasher.update(_joined_lines(digests))
    return f"{checksum.ALGORITHM}:{hasher.hexdigest()}"


def _joined_lines(rows: Sequence[str]) -> bytes:
    """``"\\n".join(rows).encode()``; a :class:`~incidentlib.row_sequence.LineColumn` holds exactly those bytes, and
    hands them over without making a row (the start snapshot's chunk ids and digests: 1.35M each at 100k incidents)."""
    return rows.joined() if isinstance(rows, LineColumn) else "\n".join(rows).encode()


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
    chunk_ids: list[str]
    meta: IndexMeta
    #: the text digest of each row's chunk, when read from disk (reuse checks them, not only the ids)
    digests: tuple[str, ...] = ()
    #: row i holds chunk i of the chunk list it was loaded for (the engine's row maps are then the identity)
    rows_are_chunks: bool = False

    @property
    def vectors(self) -> np.ndarray:
        """The row vectors (the index's own memory, not a copy)."""
        return self.index.vectors


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


def _read_build(folder: Path, meta: IndexMeta, chunks: Sequence[Chunk] | None = None) -> LoadedIndex:
    """The verified rows and index of ``meta``'s build; :class:`CacheDamaged` names the failed check.  With
    ``chunks`` (whose :func:`rows_digest` is the build's): the rows are those chunks, and the rows file is checked
    against its checksum but not parsed."""
    if not _BUILD_NAME.match(meta.build):
        raise CacheDamaged(f"meta.json names an invalid build folder {meta.build[:40]!r}")
    build = folder / meta.build
    for name in (ROWS_FILE, *dense.files_for(meta.index_kind)):  # a damaged rows file is found even when not parsed
        try:
            matches = _matches(build / name, meta.checksums.get(name))
        except OSError:
            raise CacheDamaged(f"{meta.build}/{name} is missing or unreadable") from None
        if not matches:
            raise CacheDamaged(f"{meta.build}/{name} does not match its checksum")
    try:
        lines = None if chunks is not None else (build / ROWS_FILE).read_text(encoding="utf-8").splitlines()
        index = dense.load(build, meta.index_kind)
        vectors = index.vectors
    except (OSError, ValueError, RuntimeError) as exc:
        raise CacheDamaged(f"{meta.build} cannot be read ({type(exc).__name__})") from None
    if lines is None:
        assert chunks is not None
        rows, digests = list(chunk_ids(chunks)), list(chunk_digests(chunks))
    else:
        rows, digests = _row_columns(lines)
    if vectors.ndim != 2 or vectors.dtype != np.float32 or vectors.shape != (len(rows), meta.dim):
        raise CacheDamaged(f"the index holds vectors of shape {vectors.shape} {vectors.dtype}, expected ({len(rows)}, {meta.dim}) float32")
    # vectors on disk were checked finite when written and their file matched its checksum above; scanning them
    # again would page the whole file into memory at every start
    if not dense.vectors_on_disk(meta.index_kind) and not np.isfinite(vectors).all():
        raise CacheDamaged("the index holds NaN or infinite values")
    if len(rows) != meta.chunks or len(index) != len(rows):
        raise CacheDamaged(f"{len(rows)} rows and {len(index)} vectors where meta.json says {meta.chunks}")
    return LoadedIndex(index, rows, meta, tuple(digests), rows_are_chunks=chunks is not None)


def _record_rows_digest(folder: Path, meta: IndexMeta, build: LoadedIndex) -> None:
    """Add :func:`rows_digest` of ``build``'s verified rows to its ``meta.json`` (replaced atomically); a cache that
    cannot be written keeps serving as it is."""
    updated = meta.model_copy(update={"rows_digest": rows_digest(build.chunk_ids, build.digests)})
    with contextlib.suppress(OSError):
        atomic_write_text(folder / "meta.json", updated.model_dump_json(indent=2))


def _row_columns(lines: list[str]) -> tuple[list[str], list[str]]:
    """The chunk id and digest of every row; :class:`CacheDamaged` names the first line that is not a row.

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
    for number, (line, value) in enumerate(zip(lines, values, strict=True), 1):
        if not (isinstance(value, dict) and type(value.get("id")) is str and type(value.get("digest")) is str
                and type(value.get("incident")) is str):
            try:
                value = _parse_row(line)
            except ValueError:
                raise CacheDamaged(f"{ROWS_FILE} line {number} is not a row with string id, digest and incident") from None
        ids.append(value["id"])
        digests.append(value["digest"])
    return ids, digests


def _rows(folder: Path, meta: IndexMeta) -> list[IndexRow]:
    lines = (folder / meta.build / ROWS_FILE).read_text(encoding="utf-8").splitlines()
    return [_parse_row(line) for line in lines]


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
    memory_donor: tuple[np.ndarray, list[tuple[str, str] | None]] | None = None,
    segment: int = RESUME_SEGMENT,
    chunks_digest: str | None = None,
) -> tuple[LoadedIndex, BuildReport]:
    """Return a fresh index for ``chunks``, building or updating the persisted one as needed.

    ``folder`` is :func:`store_dir` of the content; ``library`` (the library's directory) only
    helps pick a donor of unchanged vectors.  Index rows need not follow the library's chunk
    order: ``LoadedIndex.chunk_ids`` names the chunk in each row, so new chunks can be appended.
    ``memory_donor`` (vectors and the ``(chunk id, digest)`` of each row, None for a dead row) is an
    index held in memory (a carried one, :mod:`.layered`): its vectors are used instead of a donor on
    disk, and the persisted index is always written anew (compaction).

    ``chunks_digest``: :func:`rows_digest` of ``chunks`` when the caller has it (computed otherwise).

    Embedding is checkpointed every ``segment`` chunks into ``folder/.partial/``; a build that was
    interrupted (Ctrl-C, a killed process) takes those vectors back on its next run and embeds only
    the rest (``BuildReport.resumed``).
    """
    started = time.perf_counter()
    warning: str | None = None
    expected_kind = dense.kind_for(len(chunks), hnsw_threshold, ivf_threshold)
    try:
        meta = _read_meta(folder)
        if (meta is not None and meta.format_version == FORMAT_VERSION and meta.embedder == embedder.name
                and meta.dim == embedder.dim and meta.content_hash == content_hash and meta.index_kind == expected_kind
                and meta.chunks == len(chunks) and meta.rows_digest
                and meta.rows_digest == (chunks_digest or rows_digest(chunk_ids(chunks), chunk_digests(chunks)))):
            # the rows are these chunks in this order: reused without reading, parsing and matching 1M+ rows
            reused = _read_build(folder, meta, chunks)
            _touch(folder)
            return reused, _report("reused", meta, 0, len(chunks), folder, started)
        current_build = _read_build(folder, meta) if meta is not None and meta.format_version == FORMAT_VERSION else None
    except CacheDamaged as exc:
        warning = f"index cache {folder} was damaged ({exc}); rebuilt it"
        log.warning(warning)
        meta, current_build = None, None
    wanted = set(zip(chunk_ids(chunks), chunk_digests(chunks), strict=True))
    if (current_build is not None and meta is not None and meta.embedder == embedder.name and meta.dim == embedder.dim
            and meta.content_hash == content_hash and meta.index_kind == expected_kind
            and len(current_build.chunk_ids) == len(wanted)
            and set(zip(current_build.chunk_ids, current_build.digests, strict=True)) == wanted):
        _touch(folder)
        if not meta.rows_digest:  # written before the digest existed: record it, so the next start need not parse
            _record_rows_digest(folder, meta, current_build)
        return current_build, _report("reused", meta, 0, len(chunks), folder, started)

    donor: tuple[Path, IndexMeta] | None = None
    if memory_donor is not None:
        pass  # the vectors are in memory: no donor on disk
    elif current_build is not None and meta is not None and meta.embedder == embedder.name and meta.dim == embedder.dim:
        donor = (folder, meta)  # the same content with another index kind or chunking: reuse its vectors
    elif not warning:
        donor = _donor(folder, embedder, library)
    old_rows: list[IndexRow] = []
    old: LoadedIndex | None = None
    if donor is not None:
        try:
            old = _read_build(*donor)
            old_rows = _rows(*donor)
        except (CacheDamaged, OSError, ValueError):
            old, old_rows = None, []  # a damaged donor only costs re-embedding
    old_vectors = old.vectors if old is not None else np.zeros((0, embedder.dim), dtype=np.float32)
    previous = {(row["id"], row["digest"]): i for i, row in enumerate(old_rows)}
    if memory_donor is not None:
        old_vectors = memory_donor[0]
        previous = {key: i for i, key in enumerate(memory_donor[1]) if key is not None}
    current = {(c.id, c.digest) for c in chunks}
    missing = [c for c in chunks if (c.id, c.digest) not in previous]
    fresh, resumed = _embed_resumably(missing, embedder, folder, batch_size, segment, progress)

    additions_only = bool(old_rows) and all(key in current for key in previous)
    # every donor row still current and an HNSW graph or trained lists to keep: append the new chunks (incremental add)
    if old is not None and additions_only and old.index.kind == expected_kind and expected_kind in ("hnsw", "ivf"):
        order = [*old_rows, *(index_row(c) for c in missing)]
        staging = None
        if expected_kind == "ivf":
            from .ivf import IvfIndex  # FAISS is loaded already: the donor is an inverted file

            assert isinstance(old.index, IvfIndex)
            # the grown rows written into the new build's own file, not appended in memory (:meth:`.ivf.IvfIndex.add`)
            staging = _staging_folder(folder)
            with _removed_on_failure(staging):
                index = old.index.add(fresh, rows_file=staging / IVF_VECTORS_FILE)
        else:
            index = old.index.add(fresh)
        action = "extended" if missing else "refreshed"
        return _finish(action, index, order, content_hash, embedder, folder, len(missing), started, warning, library, donor,
                       resumed, staging)

    order = [index_row(c) for c in chunks]
    # an inverted file's rows are assembled in its own vectors file, mapped, in the staging folder the build is
    # written to: at 1M incidents they are 27.5 GB, more than the machine's memory, and the index is then built
    # over the file a block at a time and saved beside it without another copy (:meth:`.ivf.IvfIndex.build`)
    staging = _staging_folder(folder) if expected_kind == "ivf" else None
    with _removed_on_failure(staging):
        vectors = (np.lib.format.open_memmap(staging / IVF_VECTORS_FILE, mode="w+", dtype=np.float32,
                                             shape=(len(chunks), embedder.dim))
                   if staging is not None else np.zeros((len(chunks), embedder.dim), dtype=np.float32))
        fresh_row = {c.id: i for i, c in enumerate(missing)}
        for row, chunk in enumerate(chunks):
            key = (chunk.id, chunk.digest)
            vectors[row] = old_vectors[previous[key]] if key in previous else fresh[fresh_row[chunk.id]]
        del old, old_vectors  # the donor's memory is not needed any more
        if staging is not None:
            assert isinstance(vectors, np.memmap)
            vectors.flush()
            vectors = np.load(staging / IVF_VECTORS_FILE, mmap_mode="r", allow_pickle=False)
        index = dense.create(vectors, hnsw_threshold, ivf_threshold, progress)  # an inverted file reports its rows added
    if memory_donor is not None:
        action = "compacted"
    elif not missing:
        action = "refreshed"
    elif additions_only:
        action = "extended"  # the exact index is its vectors: the new rows are added to the reused ones
    elif len(missing) < len(chunks):
        action = "updated"
    else:
        action = "built"
    return _finish(action, index, order, content_hash, embedder, folder, len(missing), started, warning, library, donor,
                   resumed, staging)


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


def _segment_keys(chunks: list[Chunk]) -> np.ndarray:
    return np.array([f"{c.id}\0{c.digest}" for c in chunks], dtype=np.str_)


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


def _embed_resumably(chunks: list[Chunk], embedder: Embedder, folder: Path, batch_size: int, segment: int,
                     progress: ProgressFn | None) -> tuple[np.ndarray, int]:
    """Vectors for ``chunks`` (in order) and how many came from an interrupted build's checkpoints.

    The rest is embedded ``segment`` chunks at a time, each segment saved (temporary file, then rename)
    before the next starts, so an interruption loses at most one segment.
    """
    partial = folder / PARTIAL_DIR
    saved = _saved_segments(partial, embedder.dim) if partial.is_dir() else {}
    keys = _segment_keys(chunks)
    todo = [i for i, key in enumerate(keys) if str(key) not in saved]
    vectors = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
    for i, key in enumerate(keys):
        if str(key) in saved:
            vectors[i] = saved[str(key)]
    resumed = len(chunks) - len(todo)
    if progress:
        progress(0, len(todo))
    for start in range(0, len(todo), segment):
        rows = todo[start : start + segment]

        def step(done: int, _total: int, offset: int = start) -> None:
            if progress:
                progress(offset + done, len(todo))

        vectors[rows] = embed_texts([chunks[i].text for i in rows], embedder, batch_size, step)
        if len(todo) > segment:  # a build of one segment has nothing to resume
            partial.mkdir(parents=True, exist_ok=True)
            staging = partial / f".segment-{start:09d}.npz"
            with staging.open("wb") as handle:
                np.savez(handle, keys=keys[rows], vectors=vectors[rows])
            staging.rename(partial / f"segment-{start:09d}-{os.getpid()}.npz")
    return vectors, resumed


def _finish(action: str, index: VectorIndex, order: list[IndexRow], content_hash: str,
            embedder: Embedder, folder: Path, embedded: int, started: float,
            warning: str | None, library: str, donor: tuple[Path, IndexMeta] | None,
            resumed: int = 0, staging: Path | None = None) -> tuple[LoadedIndex, BuildReport]:
    meta = IndexMeta(
        format_version=FORMAT_VERSION,
        embedder=embedder.name,
        dim=embedder.dim,
        content_hash=content_hash,
        chunks=len(order),
        index_kind=index.kind,
        build=f"build-{content_hash[:16]}-{int(time.time() * 1000)}",
        built_at=time.time(),
        embedded_now=embedded - resumed,
        reused=len(order) - embedded,
        resumed=resumed,
        library=library,
        rows_digest=rows_digest([row["id"] for row in order], [row["digest"] for row in order]),
    )
    meta = _write_build(folder, meta, order, index, staging)
    shutil.rmtree(folder / PARTIAL_DIR, ignore_errors=True)  # the build is whole: its checkpoints are not needed
    if donor is not None and donor[0] != folder and library and donor[1].library == library:
        shutil.rmtree(donor[0], ignore_errors=True)  # superseded: the same directory's earlier content
    _evict(folder.parent)
    loaded = LoadedIndex(index, [row["id"] for row in order], meta)
    report = _report(action, meta, embedded - resumed, len(order) - embedded, folder, started, warning)
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


def _write_build(folder: Path, meta: IndexMeta, order: list[IndexRow], index: VectorIndex,
                 staging: Path | None = None) -> IndexMeta:
    """Write the build into ``staging`` (a folder of :func:`_staging_folder`, new unless the index's files are
    already being written there), rename it into place, then point ``meta.json`` at it."""
    staging = staging or _staging_folder(folder)
    with _removed_on_failure(staging):
        with (staging / ROWS_FILE).open("w", encoding="utf-8") as handle:
            for row in order:
                handle.write(json.dumps(row) + "\n")
        names = [ROWS_FILE, *index.save(staging)]
        meta = meta.model_copy(update={"checksums": {name: checksum.checksum_file(staging / name) for name in names}})
        staging.rename(folder / meta.build)
    atomic_write_text(folder / "meta.json", meta.model_dump_json(indent=2))
    for old in folder.glob("build-*"):
        if old.name != meta.build:
            shutil.rmtree(old, ignore_errors=True)
    _remove_orphans(folder)
    return meta


def _report(action: str, meta: IndexMeta, embedded: int, reused: int, folder: Path, started: float,
            warning: str | None = None) -> BuildReport:
    return BuildReport(
        action=action,
        embedder=meta.embedder,
        chunks=meta.chunks,
        embedded=embedded,
        reused=reused,
        index_kind=meta.index_kind,
        path=str(folder),
        seconds=round(time.perf_counter() - started, 3),
        warning=warning,
    )
