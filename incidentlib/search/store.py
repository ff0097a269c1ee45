"""Persisted dense indexes: self-describing, reused when fresh, rebuilt when stale.

Layout under the cache directory::

    <cache>/<library key>/<embedder slug>/
        meta.json                 format version, embedder, dim, content hash, build dir
        build-<hash>/             one complete build
            chunks.jsonl          chunk id, digest and incident of every row, in row order
            vectors.npy           the embeddings, row i = chunk i
            index.faiss           the FAISS index over those rows

A build is written into a temporary directory that is renamed into place, and
``meta.json`` is replaced atomically afterwards, so a crash leaves the previous
build in service.  Each embedder has its own folder, so indexes never mix.

When the library changes, vectors of unchanged chunks (same id and text digest)
are reused and only new or edited chunks are embedded.  When nothing was edited
or removed, the old FAISS index is extended in place with the new rows
(incremental add); otherwise it is rebuilt from the reused and new vectors.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
from pydantic import BaseModel

from ..embeddings import Embedder
from ..storage import atomic_write_text
from .chunks import Chunk
from .dense import DEFAULT_HNSW_THRESHOLD, FaissIndex

#: On-disk layout version; a different number means "rebuild".
FORMAT_VERSION = 1
#: Texts per embedder call while building: amortises the call overhead and keeps progress updates frequent.
EMBED_BATCH = 64

ProgressFn = Callable[[int, int], None]


class IndexRow(TypedDict):
    """One row of ``chunks.jsonl``: the chunk in that index row, its text digest and its incident."""

    id: str
    digest: str
    incident: str


def index_row(chunk: Chunk) -> IndexRow:
    """The persisted row describing ``chunk``."""
    return {"id": chunk.id, "digest": chunk.digest, "incident": chunk.incident_id}


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


def _slug(text: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60]
    return f"{clean}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def store_dir(cache_dir: Path, library_root: Path, embedder_name: str) -> Path:
    library_key = _slug(library_root.resolve().name + "-" + str(library_root.resolve()))
    return cache_dir / library_key / _slug(embedder_name)


@dataclass(frozen=True)
class LoadedIndex:
    """A usable index: the FAISS index, the chunk id of each row, the row vectors and the metadata."""

    index: FaissIndex
    chunk_ids: list[str]
    vectors: np.ndarray
    meta: IndexMeta


def _read_meta(folder: Path) -> IndexMeta | None:
    try:
        return IndexMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_build(folder: Path, meta: IndexMeta) -> tuple[list[IndexRow], np.ndarray] | None:
    build = folder / meta.build
    try:
        rows = [_parse_row(line) for line in (build / "chunks.jsonl").read_text(encoding="utf-8").splitlines() if line]
        vectors = np.load(build / "vectors.npy")
    except (OSError, ValueError):
        return None
    if len(rows) != len(vectors) or (len(vectors) and vectors.shape[1] != meta.dim):
        return None
    return rows, vectors


def ensure_index(
    chunks: list[Chunk],
    content_hash: str,
    embedder: Embedder,
    folder: Path,
    hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
    batch_size: int = EMBED_BATCH,
    progress: ProgressFn | None = None,
) -> tuple[LoadedIndex, BuildReport]:
    """Return a fresh index for ``chunks``, building or updating the persisted one as needed.

    Index rows need not follow the library's chunk order: ``LoadedIndex.chunk_ids``
    names the chunk in each row, so new chunks can be appended wherever their
    incidents sort.
    """
    started = time.perf_counter()
    meta = _read_meta(folder)
    compatible = (
        meta is not None and meta.format_version == FORMAT_VERSION and meta.embedder == embedder.name and meta.dim == embedder.dim
    )
    wanted = {c.id for c in chunks}
    if compatible and meta is not None and meta.content_hash == content_hash:
        loaded = _load(folder, meta)
        if loaded is not None and set(loaded.chunk_ids) == wanted and len(loaded.chunk_ids) == len(wanted):
            return loaded, _report("reused", meta, 0, len(chunks), folder, started)

    old_rows: list[IndexRow] = []
    old_vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    if compatible and meta is not None:
        read = _read_build(folder, meta)
        if read is not None:
            old_rows, old_vectors = read
    previous = {(row["id"], row["digest"]): i for i, row in enumerate(old_rows)}
    current = {(c.id, c.digest) for c in chunks}
    missing = [c for c in chunks if (c.id, c.digest) not in previous]
    fresh = _embed([c.text for c in missing], embedder, batch_size, progress)
    expected_kind = "hnsw" if len(chunks) >= hnsw_threshold else "flat"

    # every old row still current: keep the rows and append the new chunks (incremental add)
    if old_rows and all(key in current for key in previous) and meta is not None:
        existing = _load(folder, meta)
        if existing is not None and existing.index.kind == expected_kind:
            existing.index.add(fresh)
            order = [*old_rows, *(index_row(c) for c in missing)]
            vectors = np.vstack([old_vectors, fresh]) if len(fresh) else old_vectors
            action = "extended" if missing else "refreshed"
            return _finish(action, existing.index, order, vectors, content_hash, embedder, folder, len(missing), started)

    order = [index_row(c) for c in chunks]
    vectors = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
    fresh_row = {c.id: i for i, c in enumerate(missing)}
    for row, chunk in enumerate(chunks):
        key = (chunk.id, chunk.digest)
        vectors[row] = old_vectors[previous[key]] if key in previous else fresh[fresh_row[chunk.id]]
    index = FaissIndex.create(embedder.dim, len(chunks), hnsw_threshold)
    index.add(vectors)
    action = "updated" if len(missing) < len(chunks) else "built"
    return _finish(action, index, order, vectors, content_hash, embedder, folder, len(missing), started)


def _finish(action: str, index: FaissIndex, order: list[IndexRow], vectors: np.ndarray, content_hash: str, embedder: Embedder,
            folder: Path, embedded: int, started: float) -> tuple[LoadedIndex, BuildReport]:
    meta = IndexMeta(
        format_version=FORMAT_VERSION,
        embedder=embedder.name,
        dim=embedder.dim,
        content_hash=content_hash,
        chunks=len(order),
        index_kind=index.kind,
        build=f"build-{content_hash[:16]}-{int(time.time() * 1000)}",
        built_at=time.time(),
        embedded_now=embedded,
        reused=len(order) - embedded,
    )
    _write_build(folder, meta, order, vectors, index)
    loaded = LoadedIndex(index, [row["id"] for row in order], vectors, meta)
    return loaded, _report(action, meta, embedded, len(order) - embedded, folder, started)


def _embed(texts: list[str], embedder: Embedder, batch_size: int, progress: ProgressFn | None) -> np.ndarray:
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
    return np.vstack(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)


def _load(folder: Path, meta: IndexMeta) -> LoadedIndex | None:
    read = _read_build(folder, meta)
    if read is None:
        return None
    rows, vectors = read
    try:
        index = FaissIndex.load(folder / meta.build / "index.faiss")
    except RuntimeError:
        return None
    if len(index) != len(rows):
        return None
    return LoadedIndex(index, [row["id"] for row in rows], vectors, meta)


def _write_build(folder: Path, meta: IndexMeta, order: list[IndexRow], vectors: np.ndarray, index: FaissIndex) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
    try:
        with (staging / "chunks.jsonl").open("w", encoding="utf-8") as handle:
            for row in order:
                handle.write(json.dumps(row) + "\n")
        np.save(staging / "vectors.npy", vectors)
        index.save(staging / "index.faiss")
        staging.rename(folder / meta.build)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    atomic_write_text(folder / "meta.json", meta.model_dump_json(indent=2))
    for old in folder.glob("build-*"):
        if old.name != meta.build:
            shutil.rmtree(old, ignore_errors=True)


def _report(action: str, meta: IndexMeta, embedded: int, reused: int, folder: Path, started: float) -> BuildReport:
    return BuildReport(
        action=action,
        embedder=meta.embedder,
        chunks=meta.chunks,
        embedded=embedded,
        reused=reused,
        index_kind=meta.index_kind,
        path=str(folder),
        seconds=round(time.perf_counter() - started, 3),
    )
