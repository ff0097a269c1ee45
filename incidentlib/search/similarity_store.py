"""What the first ``similar`` request builds over the whole library, persisted beside the other indexes.

Before a ``similar`` request can be answered, :class:`~.similarity.SimilarityIndex` needs, over every
record: the collection's boilerplate model (:mod:`.boilerplate`), the incident-level BM25 matrix of the
records' text with the boilerplate removed, and which dense passages are kept (those that are not all
boilerplate).  At 100k incidents that is minutes of tokenizing and sentence splitting
(docs/benchmarks.md, "Similar by incident"); this module saves it once and loads it on later starts.

Layout::

    <cache>/similarity/<key>/
        meta.json          format version, key, counts, checksum (XXH3-128) of every other file
        boilerplate.json   the boilerplate sentence keys, sorted
        vocabulary.json    the terms, in term-id order
        idf.npy            float64 (terms)
        indptr.npy         int64 (incidents + 1)   the BM25 matrix by incident (CSR)
        indices.npy        int32 term ids, ascending within an incident
        data.npy           float64 BM25 weights
        counts.npy         int32 term counts beside the weights: a library incident's own query vector
        col_indptr.npy     int64 (terms + 1)       the same matrix by term (CSC), for the candidate path
        col_indices.npy    int32 incident positions, ascending within a term
        col_data.npy       float64
        term_max.npy       float64 (terms)         per term, the largest weight and the sum of its weights over the
        term_sum.npy       float64 (terms)         incidents: MaxScore's bounds (:class:`.lexical_top.TermBounds`)
        kept.npy           int64 chunk positions of the kept dense passages, incident by incident
        starts.npy         int64 (incidents) the first kept passage of each incident

``key = XXH3-128(format version, the source of the tokenizer, the boilerplate model and the BM25
constants, every incident's id and text, every chunk's incident, kind and digest)``: a change to any
record, chunk or to that code makes a new key, so a stale artefact is never read (it is evicted
later).  Everything is verified on load (checksums, types, shapes, ranges); an artefact that fails
is rebuilt with a logged warning, and one that cannot be written only costs the next start.
Files are written into a temporary folder that is renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from pydantic import BaseModel
from scipy import sparse  # type: ignore[import-untyped]

from .. import checksum, verified_memo
from ..cold_pages import residency_visible
from ..errors import DataError
from ..mapped_arrays import MappedArraysError, map_verified_npy
from ..storage import atomic_write_text
from . import boilerplate as boilerplate_module
from . import tokenize as tokenize_module
from .lexical_top import TermBounds

try:
    import fcntl
except ImportError:  # not POSIX: builds are not coordinated between processes
    fcntl = None  # type: ignore[assignment]

#: Version of the artefact's layout *and* of how :class:`~.similarity.SimilarityIndex` computes it (it is part of the
#: key): raise it when either changes, so that artefacts written by the old code are not read.
SIMILARITY_FORMAT = 2
SIMILARITY_DIR = "similarity"
#: Artefacts kept (the most recently used): the same bound as the lexical cache (lexical_store.KEEP_LEXICAL).
KEEP_SIMILARITY = 8
ARRAYS: dict[str, str] = {  # file stem -> dtype
    "idf": "float64", "indptr": "int64", "indices": "int32", "data": "float64", "counts": "int32",
    "col_indptr": "int64", "col_indices": "int32", "col_data": "float64", "term_max": "float64", "term_sum": "float64",
    "kept": "int64", "starts": "int64",
}
#: The (entries,) arrays, most of the artefact's bytes (1.35 GB at 100k incidents): memory-mapped, not read into the
#: heap; a request reads the rows and columns of its terms and candidates (docs/benchmarks.md, "The whole service …").
MAPPED = ("indices", "data", "counts", "col_indices", "col_data")
#: The mapped arrays read by incident row: a request on the candidate path (every large library) reads the rows of a
#: few thousand scattered incidents, so they are mapped for random access (no read-ahead,
#: :func:`~incidentlib.mapped_arrays.map_verified_npy`).  The exact path of a small library, and the neighbourhood and
#: reliability options, scan them whole; a cold scan then reads page by page, on files small enough to stay cached.
#: The by-term copy keeps the kernel's read-ahead: a term's column is read whole, front to back.
BY_ROW = ("indices", "data", "counts")
FILES = ("boilerplate.json", "vocabulary.json", *(f"{name}.npy" for name in ARRAYS))

log = logging.getLogger(__name__)


class SimilarityMeta(BaseModel):
    format_version: int
    key: str
    incidents: int
    chunks: int
    terms: int
    entries: int
    kept: int
    checksums: dict[str, str]


class SimilarityArtefactDamaged(DataError):
    """A persisted similarity artefact failed verification; the message names the file and the check."""


@dataclass(frozen=True)
class SimilarityArtefact:
    """The boilerplate model, the (incidents × terms) BM25 matrix by row and by column with its term counts and
    per-term bounds, and the kept-passage layout (see the module docstring)."""

    boilerplate_keys: frozenset[str]
    vocabulary: list[str]
    idf: np.ndarray
    matrix: sparse.csr_matrix
    counts: np.ndarray  # aligned with ``matrix.data``
    columns: sparse.csc_matrix
    # saved rather than reduced from ``columns`` on first use: at a million incidents that reduction reads the whole
    # by-term copy (3.6 GB) and took 19-30 s of a server's first `similar` (docs/benchmarks.md)
    bounds: TermBounds
    kept: np.ndarray
    starts: np.ndarray
    chunks: int  # chunks of the engine the layout was made for


def _code_digest() -> bytes:
    # the tokens depend on the tokenizer's code and the stripped text on the boilerplate model's; the weights on the
    # BM25 constants, which the caller puts in the key (similarity.py itself changes too often to be part of it)
    digest = xxhash.xxh3_128()
    for module in (tokenize_module, boilerplate_module):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.digest()


def similarity_key(incidents: Iterable[tuple[str, str]], chunks: Iterable[tuple[str, str, str]], constants: str,
                   counts: tuple[int, int] | None = None) -> str:
    """The artefact key (module docstring), 32 hex digits: ``incidents`` are (id, text), ``chunks`` (incident id,
    kind, digest of the id and text: :attr:`.chunks.Chunk.digest`), ``constants`` what else the artefact's values depend on (the BM25 constants, the passage kinds).
    ``counts`` (incidents, chunks) lets both be streams, read once: at 100k incidents the two lists made 1.6 GB of a
    server's RSS for a key (docs/benchmarks.md, "The whole service at 100k …")."""
    if counts is None:
        incidents, chunks = list(incidents), list(chunks)
        counts = (len(incidents), len(chunks))
    digest = xxhash.xxh3_128()
    digest.update(f"{SIMILARITY_FORMAT}\0{constants}\0{counts[0]}\0{counts[1]}\0".encode())
    digest.update(_code_digest())
    seen = [0, 0]
    for incident_id, text in incidents:
        digest.update(f"{incident_id}\0{text}\0".encode())
        seen[0] += 1
    for incident_id, kind, digest_of_text in chunks:
        digest.update(f"{incident_id}\0{kind}\0{digest_of_text}\0".encode())
        seen[1] += 1
    if tuple(seen) != counts:
        raise ValueError(f"similarity_key: read {seen[0]} incidents and {seen[1]} chunks, told {counts[0]} and {counts[1]}")
    return digest.hexdigest()


def save_artefact(folder: Path, key: str, artefact: SimilarityArtefact) -> None:
    """Write ``artefact`` to ``folder`` atomically (a temporary folder renamed into place)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".similarity-", dir=folder.parent))
    try:
        (staging / "boilerplate.json").write_text(json.dumps(sorted(artefact.boilerplate_keys), ensure_ascii=False), encoding="utf-8")
        (staging / "vocabulary.json").write_text(json.dumps(artefact.vocabulary, ensure_ascii=False), encoding="utf-8")
        arrays = _arrays_of(artefact)
        for name, dtype in ARRAYS.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(arrays[name], dtype=dtype))
        meta = SimilarityMeta(format_version=SIMILARITY_FORMAT, key=key, incidents=artefact.matrix.shape[0], chunks=artefact.chunks,
                              terms=len(artefact.vocabulary), entries=int(artefact.matrix.nnz), kept=len(artefact.kept),
                              checksums={name: checksum.checksum_file(staging / name) for name in FILES})
        atomic_write_text(staging / "meta.json", meta.model_dump_json(indent=2))
        if folder.exists():
            shutil.rmtree(staging, ignore_errors=True)  # another process saved the same artefact first
        else:
            staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _arrays_of(artefact: SimilarityArtefact) -> dict[str, np.ndarray]:
    return {"idf": artefact.idf, "indptr": artefact.matrix.indptr, "indices": artefact.matrix.indices,
            "data": artefact.matrix.data, "counts": artefact.counts, "col_indptr": artefact.columns.indptr,
            "col_indices": artefact.columns.indices, "col_data": artefact.columns.data, "term_max": artefact.bounds.maxima,
            "term_sum": artefact.bounds.sums, "kept": artefact.kept,
            "starts": artefact.starts}


def load_artefact(folder: Path, key: str, incidents: int, chunks: int) -> SimilarityArtefact:
    """Read and verify the artefact in ``folder`` for ``incidents`` incidents and ``chunks`` chunks;
    :class:`SimilarityArtefactDamaged` names the failed check."""
    try:
        meta = SimilarityMeta.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SimilarityArtefactDamaged(f"{folder / 'meta.json'}: unreadable ({type(exc).__name__})") from None
    if (meta.format_version, meta.key, meta.incidents, meta.chunks) != (SIMILARITY_FORMAT, key, incidents, chunks):
        raise SimilarityArtefactDamaged(
            f"{folder / 'meta.json'}: format {meta.format_version}, key {meta.key}, {meta.incidents} incidents, {meta.chunks} chunks; "
            f"expected format {SIMILARITY_FORMAT}, key {key}, {incidents} incidents, {chunks} chunks")
    for name in FILES:
        if name.removesuffix(".npy") in MAPPED:
            continue  # checked as they are mapped, below
        try:
            if not verified_memo.file_matches(folder / name, meta.checksums.get(name)):
                raise SimilarityArtefactDamaged(f"{folder / name}: does not match its checksum")
        except OSError:
            raise SimilarityArtefactDamaged(f"{folder / name}: missing or unreadable") from None
    checks = _entry_checks(meta.terms, incidents)
    try:
        keys = json.loads((folder / "boilerplate.json").read_text(encoding="utf-8"))
        vocabulary = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
        arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in ARRAYS if name not in MAPPED}
        for name, (check, described) in checks.items():
            arrays[name] = map_verified_npy(folder / f"{name}.npy", meta.checksums.get(f"{name}.npy", ""), check,
                                            memo_checks=f"similarity {name}: {described}", random_access=name in BY_ROW)
    except MappedArraysError as exc:
        raise SimilarityArtefactDamaged(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise SimilarityArtefactDamaged(f"{folder}: cannot be read ({type(exc).__name__})") from None
    for name, values in (("boilerplate.json", keys), ("vocabulary.json", vocabulary)):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SimilarityArtefactDamaged(f"{folder / name}: not a list of strings")
    terms, entries = meta.terms, meta.entries
    shapes = {"idf": (terms,), "indptr": (incidents + 1,), "indices": (entries,), "data": (entries,), "counts": (entries,),
              "col_indptr": (terms + 1,), "col_indices": (entries,), "col_data": (entries,), "term_max": (terms,),
              "term_sum": (terms,), "kept": (meta.kept,),
              "starts": (incidents,)}
    for name, dtype in ARRAYS.items():
        if arrays[name].dtype != np.dtype(dtype) or arrays[name].shape != shapes[name]:
            raise SimilarityArtefactDamaged(f"{folder / name}.npy: {arrays[name].dtype} {arrays[name].shape}, "
                                            f"expected {dtype} {shapes[name]}")
    if len(vocabulary) != terms:
        raise SimilarityArtefactDamaged(f"{folder / 'vocabulary.json'}: {len(vocabulary)} terms, expected {terms}")
    for pointer in ("indptr", "col_indptr"):  # their entries' values were checked as they were mapped
        offsets = arrays[pointer]
        if int(offsets[0]) != 0 or int(offsets[-1]) != entries or (np.diff(offsets) < 0).any():
            raise SimilarityArtefactDamaged(f"{folder / pointer}.npy: not a non-decreasing offset array over {entries} entries")
    for name in ("idf", "term_max", "term_sum"):
        if not np.isfinite(arrays[name]).all():
            raise SimilarityArtefactDamaged(f"{folder / name}.npy: NaN or infinite values")
    for name in ("term_max", "term_sum"):  # BM25 weights are not negative, so neither is their bound or their sum
        if (arrays[name] < 0).any():
            raise SimilarityArtefactDamaged(f"{folder / name}.npy: negative values")
    kept, starts = arrays["kept"], arrays["starts"]
    if (len(kept) and (int(kept.min()) < 0 or int(kept.max()) >= chunks)) or (len(starts) and (
            int(starts[0]) != 0 or (np.diff(starts) < 0).any() or int(starts[-1]) > len(kept))):
        raise SimilarityArtefactDamaged(f"{folder}: kept.npy / starts.npy do not describe passages of {chunks} chunks")
    hidden = [name for name in BY_ROW if not residency_visible(folder / f"{name}.npy")]
    if hidden:
        log.warning("%s: %s owned by another user and not writable: the kernel hides which of their pages are cached, "
                    "so cold rows are read one page fault at a time (build the artefact as this user to avoid it)",
                    folder, ", ".join(f"{name}.npy" for name in hidden))
    matrix = sparse.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=(incidents, terms))
    columns = sparse.csc_matrix((arrays["col_data"], arrays["col_indices"], arrays["col_indptr"]), shape=(incidents, terms))
    bounds = TermBounds(maxima=arrays["term_max"], sums=arrays["term_sum"])
    return SimilarityArtefact(frozenset(keys), vocabulary, arrays["idf"], matrix, arrays["counts"], columns, bounds, kept, starts,
                              chunks)


def _entry_checks(terms: int, incidents: int) -> dict[str, tuple[Callable[[np.ndarray], str | None], str]]:
    """The value check of each :data:`MAPPED` array, run block by block as it is mapped, and what it verifies."""
    def within(bound: int) -> Callable[[np.ndarray], str | None]:
        return lambda block: (f"values outside 0..{bound - 1}" if len(block) and (int(block.min()) < 0 or int(block.max()) >= bound)
                              else None)

    def finite(block: np.ndarray) -> str | None:
        return None if np.isfinite(block).all() else "NaN or infinite values"

    def counted(block: np.ndarray) -> str | None:
        return "counts below 1" if len(block) and int(block.min()) < 1 else None

    return {"indices": (within(terms), f"below {terms}"), "col_indices": (within(incidents), f"below {incidents}"),
            "data": (finite, "finite"), "col_data": (finite, "finite"), "counts": (counted, "at least 1")}


def cached_artefact(cache_dir: Path, key: str, incidents: int, chunks: int,
                    build: Callable[[], SimilarityArtefact] | None) -> tuple[SimilarityArtefact | None, str]:
    """The artefact under ``key``, loaded from ``cache_dir`` when present and sound, else built by ``build``, saved
    and read back mapped; also says which: ``"loaded"``, ``"built"``, or ``"unsaved"`` (the built copy, when it
    could not be saved or read back: the next start builds it again).  With ``build`` None nothing is built:
    ``(None, "absent")`` when no sound artefact is saved."""
    folder = cache_dir / SIMILARITY_DIR / key
    saved = _saved(folder, key, incidents, chunks)
    if saved is not None:
        return saved, "loaded"
    if build is None:
        return None, "absent"
    with _building(folder.parent, key):
        saved = _saved(folder, key, incidents, chunks)  # another process built it while this one waited
        if saved is not None:
            return saved, "loaded"
        artefact = build()
        try:
            save_artefact(folder, key, artefact)
            _evict(folder.parent)
        except OSError as exc:
            log.warning("could not save the similarity artefact to %s (%s); it is rebuilt next time", folder, exc)
            return artefact, "unsaved"
    # Served from the saved files, mapped, as after a restart: the build's copy (anonymous memory, about 13 GB at a
    # million incidents) is let go instead of staying in the serving process for its lifetime.
    try:
        return load_artefact(folder, key, incidents, chunks), "built"
    except (SimilarityArtefactDamaged, OSError) as exc:
        log.warning("the similarity artefact saved to %s does not read back (%s); the built copy is served", folder, exc)
        return artefact, "unsaved"


def _saved(folder: Path, key: str, incidents: int, chunks: int) -> SimilarityArtefact | None:
    """The sound artefact saved in ``folder``, else None (a damaged one is removed, with a warning)."""
    if not (folder / "meta.json").exists():
        return None
    try:
        artefact = load_artefact(folder, key, incidents, chunks)
    except SimilarityArtefactDamaged as exc:
        log.warning("similarity artefact %s was damaged (%s); rebuilt it", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    with contextlib.suppress(OSError):  # a read-only cache still serves
        os.utime(folder / "meta.json")
    return artefact


@contextlib.contextmanager
def _building(parent: Path, key: str) -> Iterator[None]:
    """Held while this process builds the artefact of ``key`` (an exclusive ``flock`` on ``parent/.<key>.lock``):
    another process or thread that needs the same artefact waits, then loads what was saved, instead of building it
    again (half an hour and 15 GB at a million incidents; a server and ``incidentlib index --similar`` may both ask).
    Without a writable cache folder, or without ``fcntl``, there is no lock: nothing could be shared anyway."""
    descriptor = _locked(parent / f".{key}.lock") if fcntl is not None else None
    try:
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)  # releases the lock


def _locked(path: Path) -> int | None:
    """A descriptor of ``path`` holding an exclusive ``flock``, or None (with a warning) when the file cannot be
    made or the file system refuses locks.  The file taken is the one at ``path`` when the lock was granted: one
    replaced meanwhile (its key evicted and made again) is let go and the new one locked."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)  # flock needs no write access: a shared cache
        except OSError:
            return None  # nothing could be saved here either
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            if os.fstat(descriptor).st_ino == os.stat(path).st_ino:
                return descriptor
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):  # a file unlinked while this process waited: take the new one
                log.warning("cannot lock %s (%s); the similarity artefact is built without it", path, exc)
                os.close(descriptor)
                return None
        os.close(descriptor)


def _evict(parent: Path, keep: int = KEEP_SIMILARITY) -> None:
    folders = []
    for sibling in parent.iterdir():
        try:
            folders.append(((sibling / "meta.json").stat().st_mtime, sibling))
        except OSError:
            continue
    for _, stale in sorted(folders, reverse=True)[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):  # its build lock (:func:`_building`), an empty file
            (parent / f".{stale.name}.lock").unlink()
