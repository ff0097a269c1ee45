"""The BM25 index persisted next to the dense one, keyed by what it is computed from.

Layout::

    <cache>/lexical/<key>/
        meta.json          format version, chunk and term counts, checksum (XXH3-128) of each file
        vocabulary.json    the terms, in term-id order
        indptr.npy         int64, terms + 1
        indices.npy        int32 chunk positions, ascending within a term
        data.npy           float32 BM25 weights
        tf.npy             int32 term counts beside the weights (only updates read them)
        lengths.npy        int32 tokens per chunk

``key = sha256(format version, tokenizer and BM25 source digests, k1, b, the texts' digest)``, where the
engine's texts' digest is that of its chunk rows (:func:`~.store.rows_digest`: every chunk's id and the SHA-256
of its id and text, which the dense store computes anyway), and a caller without one gets XXH3-128 of every
text's length and of the texts joined:
a copy of the library elsewhere, or a second process, loads the index instead of tokenizing
every chunk again; a change to the texts or to the tokenizer's code makes a new key.
Everything is verified on load (checksums, array shapes and ranges, one pass over each file) and a
cache that fails is rebuilt with a logged warning; a cache that cannot be written only costs the next
start. The arrays stay memory-mapped (read-only): they live in the page cache, shared by every process
that serves the same index.

After an edit, a live library passes the index it had (texts and postings) as ``previous``: a new
key that is not cached yet is then computed by :func:`~.lexical.update_postings` (only the new
chunks tokenized) instead of a full build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from .. import checksum
from ..mapped_arrays import MappedArraysError, map_verified_npy
from ..storage import atomic_write_text
from . import lexical, lexical_segments, tokenize
from .lexical import ARRAYS, BM25_B, BM25_K1, LexicalIndex, Postings, build_postings, update_postings

#: On-disk layout version of the lexical cache (2: term counts and chunk lengths kept; 3: XXH3-128 checksums,
#: see :mod:`incidentlib.checksum`).
LEXICAL_FORMAT = 3
LEXICAL_DIR = "lexical"
#: Lexical indexes kept: the same bound as dense builds per embedder (store.KEEP_BUILDS), for the same reasons.
KEEP_LEXICAL = 8
#: Values hashed and checked at a time when an array is loaded (4 MB of int32): the block is still in the CPU's
#: cache when it is checked right after being hashed. Chosen, not tuned.
CHECK_BLOCK = 1 << 20
#: Bump when the value checks of :func:`load_postings` change: files verified by the older checks are then checked
#: again instead of being taken from their verified memo (:mod:`incidentlib.verified_memo`).
RANGE_CHECKS_VERSION = 1

log = logging.getLogger(__name__)


class LexicalMeta(BaseModel):
    format_version: int
    chunks: int
    terms: int
    postings: int
    checksums: dict[str, str]


class LexicalDamaged(Exception):
    """A persisted lexical index failed verification; the message says which check."""


def _code_digest() -> str:
    # the tokens depend on the tokenizer's code and the weights on the scorer's: either changing means a new key
    digest = hashlib.sha256()
    for module in (tokenize, lexical):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def lexical_key(texts: Sequence[str], k1: float = BM25_K1, b: float = BM25_B, texts_digest: str | None = None) -> str:
    """The cache key of the BM25 index over ``texts`` (see the module docstring), 32 hex digits.  ``texts_digest``:
    a digest the caller already holds that determines the texts in order (the engine's is
    :func:`~.store.rows_digest` of its chunks, whose digests hash each chunk's id and text); it replaces hashing them."""
    digest = hashlib.sha256(f"{LEXICAL_FORMAT}\0{_code_digest()}\0{k1!r}\0{b!r}\0{len(texts)}\0".encode())
    if texts_digest is not None:
        digest.update(f"rows\0{texts_digest}".encode())
        return digest.hexdigest()[:32]
    # the texts joined and hashed in one call each, and their lengths (which say where each text ends, whatever
    # characters it holds): one call per text was 3-4 s of every start at 1.35M chunks
    lengths = np.fromiter((len(text) for text in texts), dtype=np.int64, count=len(texts))
    digest.update(checksum.digest(lengths.tobytes()))
    digest.update(checksum.digest("\0".join(texts).encode("utf-8", "surrogatepass")))
    return digest.hexdigest()[:32]


def load_postings(folder: Path, size: int) -> Postings:
    """Read and verify a saved index over ``size`` chunks; :class:`LexicalDamaged` names the failed check."""
    try:
        meta = LexicalMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LexicalDamaged(f"meta.json is unreadable ({type(exc).__name__})") from None
    if meta.format_version != LEXICAL_FORMAT or meta.chunks != size:
        raise LexicalDamaged(f"format {meta.format_version} over {meta.chunks} chunks, expected {LEXICAL_FORMAT} over {size}")
    try:
        if checksum.checksum_file(folder / "vocabulary.json") != meta.checksums.get("vocabulary.json"):
            raise LexicalDamaged("vocabulary.json does not match its checksum")
        vocabulary = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LexicalDamaged(f"vocabulary.json is missing or unreadable ({type(exc).__name__})") from None
    if not isinstance(vocabulary, list) or not all(isinstance(t, str) for t in vocabulary) or len(vocabulary) != meta.terms:
        raise LexicalDamaged(f"vocabulary.json is not a list of {meta.terms} strings")
    # Each array is checked (checksum, then its value ranges) in one pass over its mapped file and stays mapped:
    # the postings live in the page cache, shared by every process that serves the same index.
    checks: dict[str, Callable[[np.ndarray], str | None]] = {
        "indices": lambda part: "indices point outside the chunks" if len(part) and (
            int(part.min()) < 0 or int(part.max()) >= size) else None,
        "data": lambda part: None if np.isfinite(part).all() else "data holds NaN or infinite weights",
        "tf": lambda part: "tf holds counts below 1" if len(part) and int(part.min()) < 1 else None,
        "lengths": lambda part: "lengths hold counts below 1" if len(part) and int(part.min()) < 1 else None,
    }
    arrays: dict[str, np.ndarray] = {}
    for name in ARRAYS:
        try:
            arrays[name] = map_verified_npy(folder / f"{name}.npy", meta.checksums.get(f"{name}.npy", ""),
                                            checks.get(name), block=CHECK_BLOCK,
                                            memo_checks=f"postings ranges v{RANGE_CHECKS_VERSION}: {name} over {size} chunks")
        except OSError:
            raise LexicalDamaged(f"{name}.npy is missing or unreadable") from None
        except MappedArraysError as exc:
            raise LexicalDamaged(f"{name}.npy: {str(exc).removeprefix(f'{folder / name}.npy: ')}") from None
    indptr, indices, data, tf, lengths = (arrays[name] for name in ARRAYS)
    if (indptr.dtype != np.int64 or indptr.shape != (meta.terms + 1,) or indices.dtype != np.int32
            or data.dtype != np.float32 or indices.shape != (meta.postings,) or data.shape != (meta.postings,)
            or tf.dtype != np.int32 or tf.shape != (meta.postings,) or lengths.dtype != np.int32 or lengths.shape != (size,)):
        raise LexicalDamaged("the arrays do not have the recorded types and lengths")
    if int(indptr[0]) != 0 or int(indptr[-1]) != meta.postings or (np.diff(indptr) < 0).any():
        raise LexicalDamaged("indptr is not a non-decreasing offset array over the postings")
    return Postings(vocabulary, indptr, indices, data, size, tf, lengths)


def save_postings(folder: Path, postings: Postings) -> None:
    """Write ``postings`` to ``folder`` atomically (a temporary folder renamed into place)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".lexical-", dir=folder.parent))
    try:
        for name in ARRAYS:
            np.save(staging / f"{name}.npy", getattr(postings, name))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(staging, folder, postings)


def build_in_segments(folder: Path, texts: Sequence[str]) -> Postings:
    """The postings of ``texts`` built segment by segment (:mod:`.lexical_segments`) straight into the files of the
    cache folder ``folder`` (a temporary folder renamed into place), and loaded from there, verified and mapped."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".lexical-", dir=folder.parent)) / "postings"
    try:
        _publish(staging, folder, lexical_segments.build_postings_in_segments(texts, staging))
    finally:  # empty once renamed; otherwise a failed build's files, or the copy another process saved first
        shutil.rmtree(staging.parent, ignore_errors=True)
    return load_postings(folder, len(texts))


def _publish(staging: Path, folder: Path, postings: Postings) -> None:
    """``staging`` (holding the arrays' files) completed with the vocabulary and the checksummed meta.json, then
    renamed to ``folder``; removed instead when another process saved the same index first."""
    try:
        (staging / "vocabulary.json").write_text(json.dumps(postings.vocabulary, ensure_ascii=False), encoding="utf-8")
        names = ["vocabulary.json", *(f"{name}.npy" for name in ARRAYS)]
        meta = LexicalMeta(format_version=LEXICAL_FORMAT, chunks=postings.size, terms=len(postings.vocabulary),
                           postings=len(postings.indices), checksums={n: checksum.checksum_file(staging / n) for n in names})
        atomic_write_text(staging / "meta.json", meta.model_dump_json(indent=2))
        if folder.exists():
            shutil.rmtree(staging, ignore_errors=True)  # another process saved the same index first
        else:
            staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def cached_lexical_index(texts: Sequence[str], cache_dir: Path,
                         previous: tuple[Sequence[str], Postings] | None = None,
                         texts_digest: str | None = None, keys: Sequence[str] | None = None,
                         save_update: bool = True) -> tuple[LexicalIndex, str]:
    """The BM25 index over ``texts``, loaded from ``cache_dir`` when present; also says how it was obtained:
    ``"loaded"``, ``"updated"`` (from ``previous``, the keys and postings of the index before a change)
    or ``"built"``.  ``texts_digest``: as in :func:`lexical_key`.  ``keys``: what stands for each text in
    ``previous`` (equal keys, equal texts: the chunk digests; by default the texts themselves), see
    :func:`~.lexical.update_postings`.  ``save_update``: False leaves an updated index unsaved (a live write: the
    caller saves it later with :func:`save_lexical_index`, once writes stop).
    """
    folder = cache_dir / LEXICAL_DIR / lexical_key(texts, texts_digest=texts_digest)
    if (folder / "meta.json").exists():
        try:
            postings = load_postings(folder, len(texts))
        except LexicalDamaged as exc:
            log.warning("lexical index cache %s was damaged (%s); rebuilt it", folder, exc)
            shutil.rmtree(folder, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # a read-only cache still serves
                os.utime(folder / "meta.json")
            return LexicalIndex(postings=postings), "loaded"
    if previous is not None:
        postings, how = update_postings(previous[1], previous[0], texts, keys=keys), "updated"
        if not save_update:
            return LexicalIndex(postings=postings), how
    elif len(texts) > lexical_segments.SEGMENT_CHUNKS:
        try:
            postings = build_in_segments(folder, texts)
        except OSError as exc:  # no room for the files: the one-pass build in memory still serves
            log.warning("could not build the lexical index in segments under %s (%s); building it in memory",
                        folder.parent, exc)
            postings, how = build_postings(texts), "built"
        else:
            _evict(folder.parent)
            return LexicalIndex(postings=postings), "built"
    else:
        postings, how = build_postings(texts), "built"
    _save(folder, postings)
    return LexicalIndex(postings=postings), how


def save_lexical_index(texts: Sequence[str], cache_dir: Path, postings: Postings, texts_digest: str | None = None) -> None:
    """Save ``postings`` (over ``texts``) where :func:`cached_lexical_index` finds them, unless another process did;
    a cache that cannot be written is logged and left as it is (the next start builds the index)."""
    folder = cache_dir / LEXICAL_DIR / lexical_key(texts, texts_digest=texts_digest)
    if not (folder / "meta.json").exists():
        _save(folder, postings)


def _save(folder: Path, postings: Postings) -> None:
    """Save ``postings`` into the cache folder ``folder`` and evict the oldest; a failure is logged, not raised."""
    try:
        save_postings(folder, postings)
        _evict(folder.parent)
    except OSError as exc:
        log.warning("could not save the lexical index to %s (%s); it is rebuilt next time", folder, exc)


def _evict(parent: Path, keep: int = KEEP_LEXICAL) -> None:
    folders = []
    for sibling in parent.iterdir():
        try:
            folders.append(((sibling / "meta.json").stat().st_mtime, sibling))
        except OSError:
            continue
    for _, stale in sorted(folders, reverse=True)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
