"""The start snapshot: a library's validated records and chunks, kept so a start does not recompute them.

A start used to validate every record (pydantic), check every reference and cut every record into
chunks: per-record Python work, seconds at 10k records.  When the data files' bytes are the same as
at the last start, the answer is the same, so it is kept in one file,
``<cache dir>/start/<key>.snap``::

    b"incidentlib-start\\n"
    header: one JSON line {"format": START_FORMAT_VERSION, "key": key, "checksum": "xxh3_128:...",
                           "sizes": [bytes of each part], "concepts": n, "incidents": n, "chunks": n}
    payload: the concepts, the incidents as JSON arrays of at most RECORDS_PER_PART records each, then the
             chunk table: {"kinds": [...], "langs": [...], "incidents": [ids in order], "count": [chunks of
             each]} (JSON), each chunk's kind and language as one byte each (an index into those lists), the
             chunk ids and the chunk digests (UTF-8, one a line, joined by "\\n"), the chunk texts' ends
             (little-endian int64, one more than the chunks, the first 0) and the texts (UTF-8, end to end)

where

    key = sha256(START_FORMAT_VERSION, the parsed-YAML cache key (every data file's path and XXH3-128 of its
                 bytes, PyYAML's version), pydantic's version, and the XXH3-128 of the source of every module
                 whose code decides the records or chunks: models, vocab, loader, this one, search/chunks)

so any change of a data file, of the model classes, of the loader's checks or of the chunker gives another
key, and a snapshot is only ever used for exactly the inputs it was made from.  The checksum covers the
payload (:mod:`incidentlib.checksum`; checked once per version of the file, :mod:`incidentlib.verified_memo`);
the file is written to a temporary name and renamed.

Why JSON and not a pickle of the validated objects: measured at 10k records (docs/benchmarks.md), a pickle
of the pydantic models loads no faster than validating the records again (each model is rebuilt through
``__setstate__``), is twice the size, and would run code named by the file; pydantic's own JSON validation
of one array (Rust, no Python per field) is 1.5-2x faster than validating the parsed YAML, and keeps the
records validated by today's model classes.  The chunks are stored as columns and rebuilt without any check
(a chunk is a plain slotted dataclass), their digests included, which the dense index compares with its rows
when it loads (``search.store.ensure_index``: every chunk id and digest must be a row), so chunks that did not
match the persisted index would be re-embedded, never silently searched.

Why the incidents in parts, and the chunks' kind and language as numbers: the records of the bundled library
copied 100 times (32,200 records) added 820 MB to the process's RSS validated as one array, 563 MB validated
1,000 at a time, and 433 MB with each part's fields sets shared as it is made (:mod:`incidentlib.field_sets`);
with their chunks, this format's whole load held 0.78x the memory of format 1's for 1.21x its time
(``bench/bench_records_memory.py``, docs/benchmarks.md, "Loaded records").

Why the chunk texts apart, as raw UTF-8 with their ends: a server reads a chunk's text only to show a passage
or to rebuild an index, yet held all of them as strings (about 0.7 GB at 100k incidents). Loaded chunks are
:class:`~.search.chunks.StoredChunk` objects that make their text from the mapped file when it is read, so the
texts stay in the page cache (shared, and only what is read counts in the process's RSS) and a start does not
decode them.

Why nothing is made per record or per chunk at load (format 4): at 100k incidents, validating every record took
15-20 s and making 1.35M chunk objects 3 s more, of a 30 s start whose first answer reads ten records.  The
records are now validated a part at a time when one of the part's records is first read (:class:`RecordParts`;
ids, length and membership come from the ids column), and the chunks stay columns (:class:`~.search.chunks
.ChunkTable`), a chunk object made when one is read.  What reads every record (the graph, built after a server
listens) validates them all then.

Why the chunk ids and digests as lines, and kinds and languages as bytes (format 5): as JSON lists, parsing them was
0.8 s of a 100k start (1.35M ids and digests made as strings, and lists of them), though a start reads them only to
digest them (both persisted indexes are matched by the rows digest: ``search.store.rows_digest``, which hashes exactly
these joined lines) and then a row at a time.  The columns now stay in the mapped file
(:mod:`incidentlib.row_sequence`): a start scans them once for their line breaks and makes nothing per chunk.

A missing, stale, damaged or unreadable snapshot means loading as without it (and writing a new one);
a snapshot that cannot be written costs only the next start.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import itertools
import logging
import math
import mmap
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence, ValuesView
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import checksum, file_memo, verified_memo
from .file_memo import Signature
from .row_sequence import RowSequence
from .storage import atomic_write_bytes, keep_newest, release_pages

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from .field_sets import FieldSetSharer
    from .models import Concept, Incident
    from .search.chunks import Chunk, IncidentChunks

log = logging.getLogger(__name__)

#: Bump when the file layout or what is stored changes: older files are then ignored.
START_FORMAT_VERSION = 5
#: Folder of the snapshots inside the cache directory.
START_DIR = "start"
#: Snapshots kept (most recently used first). Each is about as large as the library's text twice over
#: (records and chunks: 0.16 GB at 10k records), so only the current content and one before it are kept
#: (an edit and its undo, two checkouts). Chosen, not tuned.
MAX_SNAPSHOTS = 2
#: A temporary file of a snapshot write older than this was left by a process that ended mid-write (a server
#: writes the snapshot in a background thread after it listens, and may be stopped meanwhile): removed by the
#: next write.  A write takes seconds at 10k records; an hour leaves any write still running alone.
STALE_TEMP_SECONDS = 3600
#: Records validated per call (a part is validated when one of its records is first read: :class:`RecordParts`).
#: A search's or ``similar``'s answer validates one part per incident it shows, so a part is small: ten hits validate
#: at most 100 records.  Parts of 1,000 made a first answer at 100k incidents validate 7,000 (2.4 s); parts of 100
#: still cost a result from a part not read yet about 20 ms at 100k synthetic incidents, most of a 470 ms ``similar``
#: by text (docs/benchmarks.md, "Similar by text at 100k").  Validating in smaller parts costs no more a record (57,
#: 44, 40, 37 and 36 µs in parts of 100, 25, 10, 5 and 1 bundled records, best of 3, one run; earlier 154, 165 and
#: 134 ms per 1,000 in parts of 1,000, 100 and 25), and smaller parts hold less heap while validated (RSS added a
#: record with the fields sets shared, "Loaded records": 13.4 KB in parts of 322 records, 13.6 of 966, 25.9 as one
#: array of 32,200).  Chosen from those figures, not tuned.
RECORDS_PER_PART = 10
_MAGIC = b"incidentlib-start\n"
#: What a snapshot's verified memo vouches for: its payload's checksum (the header's value), nothing more.
_MEMO_CHECKS = "start snapshot payload"
#: The modules whose code decides what a record or a chunk is: a change to any of them changes the key.
_CODE = ("models.py", "vocab.py", "loader.py", "strict.py", "start_snapshot.py", "search/chunks.py")
#: Segments of the chunk table, after the records: a JSON object (the kind and language names, the incident ids in
#: order and each one's number of chunks), a byte a chunk numbering its kind, one numbering its language, the ids and
#: the digests one a line, the text ends, the texts (module docstring).  A chunk's incident is not stored (its record's
#: id, from the counts); decoded, every chunk of a kind, a language or an incident shares one string object for it.
_CHUNK_SEGMENTS = 7
#: Kinds or languages a snapshot can number in its one-byte code columns (there are five kinds and three languages).
_MAX_CODES = 256


@cache
def _code_fingerprint() -> str:
    import pydantic

    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"pydantic {pydantic.VERSION}\0".encode())
    for name in _CODE:
        path = root / name
        digest.update(f"{name}\0{checksum.checksum_bytes(path.read_bytes()) if path.is_file() else '-'}\0".encode())
    return digest.hexdigest()


def snapshot_key(files_key: str) -> str:
    """The key of the snapshot for data files whose parsed-YAML cache key is ``files_key`` (module docstring)."""
    return hashlib.sha256(f"{START_FORMAT_VERSION}\0{files_key}\0{_code_fingerprint()}".encode()).hexdigest()


def snapshot_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / START_DIR / f"{key}.snap"


class Snapshot:
    """What a snapshot holds: the concepts, the incidents (id order) and each incident's chunks."""

    def __init__(self, concepts: list[Concept], incidents: Mapping[str, Incident], chunks: IncidentChunks) -> None:
        self.concepts = concepts
        self.incidents = incidents
        self.chunks = chunks


def save(cache_dir: Path, key: str, concepts: Sequence[Concept], incidents: Mapping[str, Incident],
         chunks: Mapping[str, Sequence[Chunk]]) -> bool:
    """Write the snapshot for ``key`` (temporary file, then rename); True when written.  ``chunks`` must hold
    every incident's chunks (else nothing is written: a partial snapshot would be a wrong one)."""
    import orjson

    if set(chunks) != set(incidents):
        return False
    flat = [chunk for incident_id in incidents for chunk in chunks[incident_id]]
    if any(chunk.incident_id != incident_id or not chunk.id.startswith(f"{incident_id}/")
           for incident_id in incidents for chunk in chunks[incident_id]):
        return False  # a chunk's incident is not stored: it must be the one it is listed under, which its id names
    kinds, langs = sorted({c.kind for c in flat}), sorted({c.lang for c in flat})
    if max(len(kinds), len(langs)) > _MAX_CODES:
        return False
    ids, digests = [c.id for c in flat], [c.digest for c in flat]
    if any("\n" in value for value in itertools.chain(ids, digests)):
        return False  # stored one a line (LineColumn)
    kind_number, lang_number = {kind: n for n, kind in enumerate(kinds)}, {lang: n for n, lang in enumerate(langs)}
    columns = {"kinds": kinds, "langs": langs, "count": [len(chunks[incident_id]) for incident_id in incidents],
               "incidents": list(incidents)}
    texts = [c.text.encode("utf-8") for c in flat]
    ends = array.array("q", itertools.accumulate(map(len, texts), initial=0))
    if sys.byteorder != "little":  # pragma: no cover - the offsets are stored little-endian
        ends.byteswap()
    # defaults left out: less to validate on load, and the same records (a round trip test checks it)
    records = list(incidents.values())
    parts = [orjson.dumps([c.model_dump(mode="json", exclude_defaults=True) for c in concepts]),
             *(orjson.dumps([i.model_dump(mode="json", exclude_defaults=True) for i in records[start:start + RECORDS_PER_PART]])
               for start in range(0, len(records), RECORDS_PER_PART)),
             orjson.dumps(columns), bytes(kind_number[c.kind] for c in flat), bytes(lang_number[c.lang] for c in flat),
             "\n".join(ids).encode("utf-8"), "\n".join(digests).encode("utf-8"), ends.tobytes(), b"".join(texts)]
    payload = b"".join(parts)
    header = orjson.dumps({"format": START_FORMAT_VERSION, "key": key, "checksum": checksum.checksum_bytes(payload),
                           "sizes": [len(part) for part in parts], "concepts": len(concepts),
                           "incidents": len(incidents), "chunks": len(flat)})
    target = snapshot_path(cache_dir, key)
    try:
        atomic_write_bytes(target, _MAGIC + header + b"\n" + payload)
        _prune(target.parent)
    except OSError as exc:
        log.warning("could not write the start snapshot %s (%s)", target, exc)
        return False
    return True


def load(cache_dir: Path, key: str) -> Snapshot | None:
    """The snapshot for ``key``, or None when it is absent or fails any check (logged: it is then rebuilt).

    The file is mapped, not read: its bytes stay in the page cache instead of a copy of the whole file in the heap
    while the records are made (1.6 GB at 100k records), and the checksum's pass lets each block go once hashed.
    The chunks keep reading their texts from the map for as long as they live."""
    path = snapshot_path(cache_dir, key)
    try:
        with path.open("rb") as handle:
            before = file_memo.signature(os.fstat(handle.fileno()))  # of the bytes mapped below
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        log.warning("start snapshot %s is unreadable (%s); loading the records", path, exc)
        return None
    try:
        snapshot = _decode(mapped, key, path, before)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        log.warning("start snapshot %s is not used (%s); loading the records", path, exc)
        with contextlib.suppress(BufferError):  # a view still held elsewhere: the map goes with it
            mapped.close()
        return None
    # the map stays open: the chunks read their texts from it (TextColumn), and the file is only ever replaced
    # by a rename, never written in place, so what is mapped does not change under them
    verified_memo.touch(path)  # last use: what _prune keeps (the memo's time when there is one: module verified_memo)
    return snapshot


def _decode(blob: bytes | mmap.mmap, key: str, path: Path | None = None, before: Signature | None = None) -> Snapshot:
    """The snapshot in ``blob``; with the file's ``path`` and its signature ``before`` it was mapped, its checksum
    pass is skipped while the file is as it was when last found to match (:mod:`incidentlib.verified_memo`)."""
    import orjson

    if blob[:len(_MAGIC)] != _MAGIC:
        raise ValueError("not a start snapshot")
    end = blob.find(b"\n", len(_MAGIC))
    if end < 0:
        raise ValueError("no header line")
    header: dict[str, Any] = orjson.loads(blob[len(_MAGIC):end])
    if header.get("format") != START_FORMAT_VERSION or header.get("key") != key:
        raise ValueError(f"format {header.get('format')!r} or key differs")
    expected = str(header.get("checksum"))
    if path is None or before is None or not verified_memo.recall(path, expected, _MEMO_CHECKS, before):
        found = checksum.checksum_mapped(blob, end + 1) if isinstance(blob, mmap.mmap) else \
            checksum.checksum_bytes(memoryview(blob)[end + 1:])
        if found != expected:
            raise ValueError("checksum mismatch (damaged)")
        if path is not None and before is not None:
            verified_memo.remember(path, before, expected, _MEMO_CHECKS)
    with memoryview(blob) as whole:
        payload = whole[end + 1:]
        sizes = header["sizes"]
        if len(sizes) != _CHUNK_SEGMENTS + 1 + math.ceil(header["incidents"] / RECORDS_PER_PART) or sum(sizes) != len(payload):
            raise ValueError("segment sizes differ from the payload")
        ends = list(itertools.accumulate(sizes, initial=0))
        bounds = list(itertools.pairwise(ends[1:-_CHUNK_SEGMENTS]))
        concepts = decode_concepts(payload[:ends[1]])
        if len(concepts) != header["concepts"]:
            raise ValueError("counts differ from the header")
        # the chunk segments, as offsets of the whole blob: columns, kind codes, language codes, ids, digests, text
        # ends, texts
        segments = [(end + 1 + low, end + 1 + high) for low, high in itertools.pairwise(ends[-_CHUNK_SEGMENTS - 1:])]
        ids, chunks = decode_chunks(blob, segments, header["incidents"], header["chunks"])
        payload.release()
    name = str(path) if path is not None else "start snapshot"
    incidents = RecordParts(blob, ids, [(end + 1 + start, end + 1 + stop) for start, stop in bounds], name)
    return Snapshot(concepts, incidents, chunks)


def decode_concepts(blob: bytes | memoryview) -> list[Concept]:
    """The vocabulary's concepts, validated again by today's model classes."""
    from pydantic import TypeAdapter

    from .field_sets import FieldSetSharer
    from .models import Concept

    vocabulary = TypeAdapter(list[Concept]).validate_json(bytes(blob))
    FieldSetSharer().share(vocabulary)
    return vocabulary


class TextColumn(RowSequence[str]):
    """The chunk texts, UTF-8 end to end in the snapshot's mapped file: text ``i`` is made when it is read.

    ``offsets`` is the segment of ``count + 1`` little-endian int64 ends (the first 0) of the texts in the
    segment of ``size`` bytes at ``start`` of ``buffer``; checked to rise from 0 to ``size`` when made."""

    def __init__(self, buffer: bytes | mmap.mmap, start: int, offsets: bytes | memoryview, size: int) -> None:
        import numpy as np

        ends = np.frombuffer(offsets, dtype="<i8").copy()  # off the map: read on every access
        if len(ends) == 0 or ends[0] != 0 or ends[-1] != size or (len(ends) > 1 and (np.diff(ends) < 0).any()):
            raise ValueError("the chunk text offsets do not rise from 0 to the texts' size")
        self._buffer = buffer
        self._start = start
        self._ends = ends

    def __len__(self) -> int:
        return len(self._ends) - 1

    def _row(self, row: int) -> str:
        return str(self._buffer[self._start + int(self._ends[row]):self._start + int(self._ends[row + 1])], "utf-8")


def decode_chunks(blob: bytes | mmap.mmap, segments: Sequence[tuple[int, int]], incidents: int,
                  count: int) -> tuple[list[str], IncidentChunks]:
    """The ids of the ``incidents`` incidents (in order) and their chunks (``count`` in all), from the chunk
    segments of ``blob`` (``(start, stop)`` each, in the order :func:`save` writes them): a
    :class:`~.search.chunks.ChunkTable` over columns that stay in ``blob`` (:mod:`incidentlib.row_sequence`), a
    chunk made when it is read.  Only the shapes are checked (every column ``count`` rows, codes in range, text
    ends rising): what the rows hold was checked by :func:`save` and is covered by the checksum."""
    import orjson

    from .row_sequence import CodedColumn, LineColumn, RunColumn
    from .search.chunks import ChunkTable, IncidentChunks

    (columns_at, kinds_at, langs_at, ids_at, digests_at, ends_at, texts_at) = segments
    columns = orjson.loads(blob[columns_at[0]:columns_at[1]])
    counts, ids = columns["count"], columns["incidents"]
    if sum(counts) != count or len(counts) != incidents or len(ids) != incidents or len(set(ids)) != incidents \
            or kinds_at[1] - kinds_at[0] != count or langs_at[1] - langs_at[0] != count:
        raise ValueError("counts differ from the header")
    texts = TextColumn(blob, texts_at[0], blob[ends_at[0]:ends_at[1]], texts_at[1] - texts_at[0])
    if len(texts) != count:
        raise ValueError("counts differ from the header")
    table = ChunkTable(LineColumn(blob, ids_at[0], ids_at[1] - ids_at[0], count), RunColumn(ids, counts),
                       CodedColumn(columns["kinds"], blob[kinds_at[0]:kinds_at[1]]),
                       CodedColumn(columns["langs"], blob[langs_at[0]:langs_at[1]]),
                       LineColumn(blob, digests_at[0], digests_at[1] - digests_at[0], count), texts)
    return ids, IncidentChunks(table, ids, counts)


class RecordParts(Mapping[str, "Incident"]):
    """The snapshot's incidents by id (in id order), each part of :data:`RECORDS_PER_PART` records validated by
    today's model classes the first time one of its records is read, its fields sets shared as it is made
    (:mod:`incidentlib.field_sets`).  Thread-safe: a part is validated once, under a lock.

    Why on first read: validating all 100k records of a library took 15-20 s of a 30 s start, and a server answers
    its first searches with a few of them (the hits'); the rest are validated by whatever first reads them (the graph
    built after the server listens).  Ids, length and membership need no record.  The bytes were checked against the
    snapshot's checksum when it was opened and come from this very code (the key covers it), so a part that fails
    validation later means a fault of this program, not of the file: :class:`SnapshotRecordsError` says which."""

    def __init__(self, buffer: bytes | mmap.mmap, ids: list[str], bounds: Sequence[tuple[int, int]], name: str) -> None:
        if len(bounds) != math.ceil(len(ids) / RECORDS_PER_PART):
            raise ValueError("segment sizes differ from the payload")
        self._buffer = buffer
        self._ids = ids
        self._position = {incident_id: n for n, incident_id in enumerate(ids)}
        self._bounds = list(bounds)
        self._parts: list[list[Incident] | None] = [None] * len(bounds)
        self._name = name
        self._lock = threading.Lock()
        self._sharer: FieldSetSharer | None = None
        self._adapter: TypeAdapter[list[Incident]] | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __contains__(self, key: object) -> bool:
        return key in self._position

    def __getitem__(self, key: str) -> Incident:
        position = self._position[key]
        part, row = divmod(position, RECORDS_PER_PART)
        records = self._parts[part]
        if records is None:
            records = self._validate(part)
        return records[row]

    def values(self) -> ValuesView[Incident]:  # a part at a time, not a look-up per record
        return _PartValues(self)

    @property
    def validated(self) -> int:
        """How many records have been validated so far."""
        return sum(len(part) for part in self._parts if part is not None)

    def scan(self) -> Iterator[Incident]:
        """Every record in id order, for a pass that keeps little of them (the graph projection, the tagger's
        choice of training records): a part not validated yet is validated for this pass and not kept.

        Why: a server reads every record once after it listens, to build its graph, and keeping them all made
        1.3 GB of its RSS at 100k records (docs/benchmarks.md, "The whole service at 100k …") where its searches
        read ten.  A later read of a record validates its part again (15 ms a part)."""
        for index in range(len(self._parts)):
            records = self._parts[index]
            if records is None:
                records = self._parse(index)
                if isinstance(self._buffer, mmap.mmap):  # nor its bytes (mapped pages count in the RSS too)
                    release_pages(self._buffer, *self._bounds[index])
            yield from records

    def _parse(self, part: int) -> list[Incident]:
        """Part ``part``'s records, validated and checked against the index (not kept)."""
        from pydantic import TypeAdapter, ValidationError

        from .models import Incident

        start, stop = self._bounds[part]
        expected = self._ids[part * RECORDS_PER_PART:(part + 1) * RECORDS_PER_PART]
        try:
            adapter = self._adapter
            if adapter is None:
                adapter = self._adapter = TypeAdapter(list[Incident])
            records = adapter.validate_json(self._buffer[start:stop])
        except ValidationError as exc:
            raise SnapshotRecordsError(f"{self._name}: records part {part} does not validate ({exc.error_count()} "
                                       "errors); remove the file to load the data files") from None
        if [record.id for record in records] != expected:
            raise SnapshotRecordsError(f"{self._name}: records part {part} holds other ids than its index; "
                                       "remove the file to load the data files")
        return records

    def _validate(self, part: int) -> list[Incident]:
        from .field_sets import FieldSetSharer

        with self._lock:
            records = self._parts[part]
            if records is not None:  # validated by another thread meanwhile
                return records
            records = self._parse(part)
            if isinstance(self._buffer, mmap.mmap):  # its bytes are not read again, unless by a scan
                start, stop = self._bounds[part]
                release_pages(self._buffer, start, stop)
            if self._sharer is None:
                self._sharer = FieldSetSharer()
            self._sharer.share(records)
            self._parts[part] = records
            return records


class _PartValues(ValuesView["Incident"]):
    """The records of a :class:`RecordParts` in id order, read a part at a time (no look-up per record)."""

    _mapping: RecordParts

    def __iter__(self) -> Iterator[Incident]:
        parts = self._mapping
        for index in range(len(parts._parts)):
            records = parts._parts[index]
            yield from records if records is not None else parts._validate(index)


class SnapshotRecordsError(RuntimeError):
    """A record part of a checked start snapshot did not validate: a fault of this program (RecordParts says why)."""


def _prune(folder: Path) -> None:
    """Keep the :data:`MAX_SNAPSHOTS` most recently used snapshots of ``folder``."""
    keep_newest(folder, "*.snap", MAX_SNAPSHOTS, used=verified_memo.last_used)
    for memo in folder.glob(f"*.snap{verified_memo.SUFFIX}"):  # the memos of snapshots just removed
        if not memo.with_name(memo.name.removesuffix(verified_memo.SUFFIX)).exists():
            with contextlib.suppress(OSError):
                memo.unlink()
    stale = time.time() - STALE_TEMP_SECONDS
    for entry in folder.glob(".*.snap.*.tmp"):  # atomic_write_bytes's temporary names
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < stale:
                entry.unlink()
