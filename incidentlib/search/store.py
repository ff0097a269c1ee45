"""Persisted dense indexes: self-describing, reused when fresh, rebuilt when stale.

Layout under the cache directory::

    <cache>/<library key>/<embedder slug>/
        meta.json                 format version, embedder, dim, content hash, build dir
        build-<hash>/             one complete build
            chunks.jsonl          chunk id, digest and incident of every row
            vectors.npy           the embeddings, row i = chunk i
            index.faiss           the FAISS index over those rows

A build is written into a temporary directory that is renamed into place, and
``meta.json`` is replaced atomically afterwards, so a crash leaves the previous
build in service.  Each embedder has its own folder, so indexes never mix.

When the library changes, vectors of unchanged chunks (same id and text digest)
are reused and only new or edited chunks are embedded; if the old chunks are all
still present, the old FAISS index is extended in place (incremental add).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from ..embeddings import Embedder
from ..storage import atomic_write_text
from .chunks import Chunk
from .dense import DEFAULT_HNSW_THRESHOLD, FaissIndex

FORMAT_VERSION = 1

ProgressFn = Callable[[int, int], None]


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
    """What :func:`ensure_index` did: reused, extended or rebuilt, and how many chunks it embedded."""

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


class LoadedIndex:
    def __init__(self, index: FaissIndex, chunk_ids: list[str], vectors: np.ndarray, meta: IndexMeta):
        self.index = index
        self.chunk_ids = chunk_ids
        self.vectors = vectors
        self.meta = meta


def _read_meta(folder: Path) -> IndexMeta | None:
    try:
        return IndexMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _read_build(folder: Path, meta: IndexMeta) -> tuple[list[dict], np.ndarray] | None:
    build = folder / meta.build
    try:
        rows = [json.loads(line) for line in (build / "chunks.jsonl").read_text(encoding="utf-8").splitlines() if line]
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
    batch_size: int = 64,
    progress: ProgressFn | None = None,
) -> tuple[LoadedIndex, BuildReport]:
    """Return a fresh index for ``chunks``, building or updating the persisted one as needed."""
    started = time.perf_counter()
    meta = _read_meta(folder)
    compatible = meta is not None and meta.format_version == FORMAT_VERSION and meta.embedder == embedder.name and meta.dim == embedder.dim
    wanted_ids = [c.id for c in chunks]
    if compatible and meta is not None and meta.content_hash == content_hash:
        loaded = _load(folder, meta)
        if loaded is not None and loaded.chunk_ids == wanted_ids:
            return loaded, _report("reused", meta, 0, len(chunks), folder, started)

    previous: dict[str, np.ndarray] = {}
    old_rows: list[dict] = []
    old_vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    if compatible and meta is not None:
        read = _read_build(folder, meta)
        if read is not None:
            old_rows, old_vectors = read
            previous = {f"{row['id']}\0{row['digest']}": old_vectors[i] for i, row in enumerate(old_rows)}

    keys = [f"{c.id}\0{c.digest}" for c in chunks]
    missing = [i for i, key in enumerate(keys) if key not in previous]
    fresh = _embed([chunks[i].text for i in missing], embedder, batch_size, progress)
    vectors = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
    for row, key in enumerate(keys):
        if key in previous:
            vectors[row] = previous[key]
    if missing:
        vectors[missing] = fresh

    old_keys = [f"{row['id']}\0{row['digest']}" for row in old_rows]
    appended_only = bool(old_keys) and keys[: len(old_keys)] == old_keys
    index: FaissIndex | None = None
    if appended_only and meta is not None:
        existing = _load(folder, meta)
        if existing is not None and existing.index.kind == ("hnsw" if len(chunks) >= hnsw_threshold else "flat"):
            index = existing.index
            index.add(vectors[len(old_keys) :])
    action = "extended" if index is not None else ("updated" if previous else "built")
    if index is None:
        index = FaissIndex.create(embedder.dim, len(chunks), hnsw_threshold)
        index.add(vectors)

    new_meta = IndexMeta(
        format_version=FORMAT_VERSION,
        embedder=embedder.name,
        dim=embedder.dim,
        content_hash=content_hash,
        chunks=len(chunks),
        index_kind=index.kind,
        build=f"build-{content_hash[:16]}-{int(time.time() * 1000)}",
        built_at=time.time(),
        embedded_now=len(missing),
        reused=len(chunks) - len(missing),
    )
    _write_build(folder, new_meta, chunks, vectors, index)
    loaded = LoadedIndex(index, wanted_ids, vectors, new_meta)
    return loaded, _report(action, new_meta, len(missing), len(chunks) - len(missing), folder, started)


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


def _write_build(folder: Path, meta: IndexMeta, chunks: list[Chunk], vectors: np.ndarray, index: FaissIndex) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
    try:
        with (staging / "chunks.jsonl").open("w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(json.dumps({"id": chunk.id, "digest": chunk.digest, "incident": chunk.incident_id}) + "\n")
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
