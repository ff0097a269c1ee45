"""The start snapshot (incidentlib.start_snapshot): validated records and chunks kept for the next start,
the same as a fresh load, and rebuilt, never trusted, when damaged or stale."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
import yaml
from conftest import small_library

from incidentlib import start_snapshot
from incidentlib.library import Library
from incidentlib.loader import LibraryData, each_record, load_library
from incidentlib.overlaid import OverlaidRecords
from incidentlib.row_sequence import LineColumn, RunColumn
from incidentlib.search.chunks import Chunk, ChunkTable, IncidentChunks, incident_chunks
from incidentlib.search.engine import SearchConfig

IDS = ["IL-0021", "IL-0025", "IL-0126", "IL-0133"]


def _open(root: Path, cache: Path) -> Library:
    return Library.open(root, SearchConfig(cache_dir=cache))


def _started(root: Path, cache: Path) -> Library:
    """A first start: records loaded from the YAML, chunked by the engine, snapshot written."""
    library = _open(root, cache)
    assert library.data.chunks is None and library.data.snapshot_key is not None
    _ = library._search_engine.chunks
    assert library.save_start_snapshot()
    return library


def _same_as_fresh(data: LibraryData, root: Path) -> None:
    fresh = load_library(root)
    assert data.incidents == fresh.incidents and list(data.incidents) == list(fresh.incidents)
    assert list(data.vocab) == list(fresh.vocab)
    assert data.content_hash == fresh.content_hash
    assert data.chunks is not None
    assert data.chunks == {i.id: incident_chunks(i, fresh.vocab) for i in fresh.incidents.values()}
    assert all(c.digest == incident_chunks(data.incidents[i], data.vocab)[n].digest
               for i, chunks in data.chunks.items() for n, c in enumerate(chunks))


def test_a_start_from_the_snapshot_equals_a_fresh_load(tmp_path: Path, data_dir: Path) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    first = _started(root, cache)
    again = _open(root, cache)
    _same_as_fresh(again.data, root)
    # the engine takes the snapshot's chunks instead of cutting the records again
    assert again._search_engine.chunks == first._search_engine.chunks
    assert again.data.chunks is not None
    assert isinstance(again.data.chunks, IncidentChunks)
    assert again._search_engine.chunks is again.data.chunks.table  # the snapshot's columns themselves
    assert not again.save_start_snapshot()  # read from a snapshot: nothing to write
    # the columns stay stored (format 5): the digest both indexes are matched by, and each chunk's incident, come
    # from them without a row made, and equal what the cut chunks give
    table = again.data.chunks.table
    assert isinstance(table.ids, LineColumn) and isinstance(table.digests, LineColumn)
    assert isinstance(table.incident_ids, RunColumn)
    assert again._search_engine.chunks_digest == first._search_engine.chunks_digest
    assert again._search_engine._chunk_incident.tolist() == first._search_engine._chunk_incident.tolist()
    assert again.search("NCCL watchdog", k=3).model_dump() == first.search("NCCL watchdog", k=3).model_dump()


def test_chunks_from_the_snapshot_share_their_repeated_strings(tmp_path: Path, data_dir: Path) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    data = _open(root, cache).data
    assert data.chunks is not None
    flat = [chunk for chunks in data.chunks.values() for chunk in chunks]
    ids = list(data.incidents)
    # one id string an incident, shared by its chunks (and by the mapping's keys), not a copy per chunk
    assert all(chunk.incident_id is incident_id for incident_id, chunks in zip(ids, data.chunks.values(), strict=True)
               for chunk in chunks)
    assert all(chunk.incident_id == data.incidents[chunk.incident_id].id for chunk in flat)
    assert len({id(chunk.kind) for chunk in flat}) == len({chunk.kind for chunk in flat}) > 1
    assert len({id(chunk.lang) for chunk in flat}) == len({chunk.lang for chunk in flat}) >= 2


def test_records_in_several_parts_load_as_one_library(tmp_path: Path, data_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 3)  # 4 records: parts of 3 and 1
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    key = _started(root, cache).data.snapshot_key
    assert key is not None
    blob = start_snapshot.snapshot_path(cache, key).read_bytes()
    header = json.loads(blob.split(b"\n")[1])
    # concepts, two parts of incidents, then the chunk table: names and counts, kind and language codes, ids, digests,
    # text ends, texts
    assert len(header["sizes"]) == 10
    again = _open(root, cache)
    assert again.data.chunks is not None
    _same_as_fresh(again.data, root)
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # read as parts of 1: the sizes no longer fit
    assert start_snapshot.load(cache, key) is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "garbage", "empty", "no header line"])
def test_a_damaged_snapshot_is_rebuilt_not_trusted(tmp_path: Path, data_dir: Path, damage: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    key = _started(root, cache).data.snapshot_key
    assert key is not None
    path = start_snapshot.snapshot_path(cache, key)
    blob = bytearray(path.read_bytes())
    if damage == "flip":
        blob[-100] ^= 0x20  # one bit in the chunk texts
    elif damage == "truncate":
        del blob[len(blob) // 2:]
    elif damage == "header":
        blob = blob.replace(b'"format":%d' % start_snapshot.START_FORMAT_VERSION, b'"format":0', 1)
    elif damage == "empty":
        blob = bytearray()
    elif damage == "no header line":
        del blob[blob.index(b"\n", len(b"incidentlib-start\n")):]
    else:
        blob = bytearray(b"not a snapshot at all")
    path.write_bytes(bytes(blob))
    with caplog.at_level(logging.WARNING, logger="incidentlib.start_snapshot"):
        reloaded = _open(root, cache)
    assert reloaded.data.chunks is None  # loaded from the YAML
    assert ("is unreadable" if damage == "empty" else "is not used") in caplog.text
    fresh = load_library(root)
    assert reloaded.data.incidents == fresh.incidents
    _ = reloaded._search_engine.chunks
    assert reloaded.save_start_snapshot()  # and the snapshot is written again, whole
    _same_as_fresh(_open(root, cache).data, root)


def test_a_changed_record_makes_the_snapshot_stale(tmp_path: Path, data_dir: Path) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    before = _started(root, cache).data
    path = root / "incidents" / f"{IDS[1]}.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["title"]["en"] += " (edited)"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    after = _open(root, cache)
    assert after.data.chunks is None and after.data.snapshot_key != before.snapshot_key
    assert after.data.incidents[IDS[1]].title.en == before.incidents[IDS[1]].title.en + " (edited)"
    assert any(c.text.startswith(after.data.incidents[IDS[1]].title.en) for c in after._search_engine.chunks)


def test_the_key_covers_the_code_that_makes_records_and_chunks() -> None:
    """The same files read by another chunker or model module give another key."""
    key = start_snapshot.snapshot_key("files")
    assert key != start_snapshot.snapshot_key("other files")
    start_snapshot._code_fingerprint.cache_clear()
    try:
        original = start_snapshot._CODE
        start_snapshot._CODE = (*original[:-1],)  # type: ignore[misc]  # as if search/chunks.py were another file
        assert start_snapshot.snapshot_key("files") != key
    finally:
        start_snapshot._CODE = original  # type: ignore[misc]
        start_snapshot._code_fingerprint.cache_clear()
    assert start_snapshot.snapshot_key("files") == key


def test_a_library_with_problems_or_live_writes_gets_no_snapshot(tmp_path: Path, data_dir: Path) -> None:
    from incidentlib.loader import check_library

    root = small_library(tmp_path / "lib", data_dir, IDS)
    (root / "incidents" / "IL-0999.yaml").write_text("id: IL-0999\n", encoding="utf-8")
    data, problems = check_library(root, tmp_path / "cache")
    assert problems and (data is None or data.snapshot_key is None)


def test_a_write_cut_short_leaves_a_temporary_file_that_a_later_write_removes(tmp_path: Path, data_dir: Path) -> None:
    import os
    import time

    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    folder = cache / start_snapshot.START_DIR
    folder.mkdir(parents=True)
    old, recent = folder / ".abc.snap.x1.tmp", folder / ".abc.snap.x2.tmp"  # atomic_write_bytes's names
    old.write_bytes(b"half")
    recent.write_bytes(b"half")
    long_ago = time.time() - start_snapshot.STALE_TEMP_SECONDS - 60
    os.utime(old, (long_ago, long_ago))
    _started(root, cache)
    assert not old.exists()  # left by a process stopped mid-write
    assert recent.exists()  # possibly another process's write still running
    assert len(list(folder.glob("*.snap"))) == 1


@pytest.mark.slow  # an app's lifespan with its SPARQL graph process and background threads: about 10 s here
def test_the_server_writes_the_snapshot_after_it_answers(tmp_path: Path, data_dir: Path, hashed_tagger: Path) -> None:
    import time

    from conftest import seed_tagger
    from fakes import HashEmbedder
    from fastapi.testclient import TestClient

    from incidentlib.api import ServiceSettings, create_app

    root = small_library(tmp_path / "lib", data_dir, IDS)
    cache = seed_tagger(hashed_tagger, tmp_path / "cache")
    library = Library.open(root, SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    library.build_index(save_snapshot=False)  # what serve does before it listens
    library.warm_search(save_snapshot=False)
    assert library.data.snapshot_key is not None
    path = start_snapshot.snapshot_path(cache, library.data.snapshot_key)
    assert not path.exists()
    with TestClient(create_app(library, ServiceSettings(mount_mcp=False, follow_changes=False)),
                    base_url="http://127.0.0.1:8000") as client:
        assert client.get("/search", params={"q": "NCCL timeout", "k": 3}).status_code == 200
        deadline = time.monotonic() + 60  # a bound on waiting for the background thread, not a timing check
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert path.exists()
    again = _open(root, cache)
    _same_as_fresh(again.data, root)


def test_snapshot_chunks_read_their_texts_from_the_mapped_file(tmp_path: Path, data_dir: Path) -> None:
    """Loaded chunks hold a row, not a string: equal to fresh chunks, pickled as plain ones, written back the same."""
    import pickle

    from incidentlib.search.chunks import Chunk, StoredChunk

    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    data = _open(root, cache).data
    assert data.chunks is not None
    flat = [chunk for chunks in data.chunks.values() for chunk in chunks]
    assert flat and all(type(chunk) is StoredChunk for chunk in flat)
    assert any(any("\uac00" <= char <= "\ud7a3" for char in chunk.text) for chunk in flat)  # UTF-8 beyond ASCII
    fresh = [chunk for incident in data.incidents.values() for chunk in incident_chunks(incident, data.vocab)]
    assert [chunk.text for chunk in flat] == [chunk.text for chunk in fresh]
    assert flat == fresh and fresh == flat and {hash(c) for c in flat} == {hash(c) for c in fresh}
    copied = pickle.loads(pickle.dumps(flat[0]))
    assert type(copied) is Chunk and copied == flat[0] and copied.text == flat[0].text
    # a snapshot written from loaded chunks holds the same bytes as the one written from cut chunks
    key = data.snapshot_key
    assert key is not None
    before = start_snapshot.snapshot_path(cache, key).read_bytes()
    assert start_snapshot.save(cache, key, list(data.vocab), data.incidents, data.chunks)
    assert start_snapshot.snapshot_path(cache, key).read_bytes() == before


def test_text_ends_that_do_not_rise_are_refused_even_with_a_matching_checksum(
        tmp_path: Path, data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    import struct

    from incidentlib import checksum

    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    key = _started(root, cache).data.snapshot_key
    assert key is not None
    path = start_snapshot.snapshot_path(cache, key)
    blob = path.read_bytes()
    magic_end = len(b"incidentlib-start\n")
    line_end = blob.index(b"\n", magic_end)
    header = json.loads(blob[magic_end:line_end])
    payload = bytearray(blob[line_end + 1:])
    ends_at = sum(header["sizes"][:-2])
    struct.pack_into("<q", payload, ends_at + 8, 10**9)  # the first text's end far past the texts
    header["checksum"] = checksum.checksum_bytes(bytes(payload))
    path.write_bytes(blob[:magic_end] + json.dumps(header, separators=(",", ":")).encode() + b"\n" + bytes(payload))
    with caplog.at_level(logging.WARNING, logger="incidentlib.start_snapshot"):
        reloaded = _open(root, cache)
    assert reloaded.data.chunks is None and "do not rise from 0" in caplog.text


def test_records_from_the_snapshot_are_validated_a_part_at_a_time_when_first_read(
        tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 2)  # 4 records: two parts
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    library = _open(root, cache)
    records = library.data.incidents
    assert isinstance(records, start_snapshot.RecordParts)
    # ids, length, membership and the engine's chunks need no record
    assert list(records) == IDS and len(records) == 4 and "IL-0126" in records and "IL-9999" not in records
    assert len(library._search_engine.chunks) > 4 * 2
    assert records.validated == 0
    fresh = load_library(root)
    third = records["IL-0126"]
    assert third == fresh.incidents["IL-0126"] and records.validated == 2  # its part only
    assert records["IL-0133"] == fresh.incidents["IL-0133"]  # the same part
    assert records["IL-0126"] is third  # validated once
    assert records.validated == 2
    with pytest.raises(KeyError):
        records["IL-9999"]
    assert list(records.values()) == list(fresh.incidents.values()) and records.validated == 4
    assert records == fresh.incidents and dict(records.items()) == fresh.incidents


def test_a_scan_reads_every_record_and_keeps_none(tmp_path: Path, data_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 2)  # 4 records: two parts
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    records = _open(root, cache).data.incidents
    assert isinstance(records, start_snapshot.RecordParts)
    fresh = load_library(root)
    assert list(each_record(records)) == list(fresh.incidents.values()) and records.validated == 0
    kept = records["IL-0126"]  # its part is validated and kept: a scan gives that very record
    assert records.validated == 2 and any(record is kept for record in each_record(records))
    assert records.validated == 2
    # the graph's projection is the same as from the files' records, and keeps no record either
    from incidentlib.graph.projection import build_projection

    snapshot = _open(root, cache).data
    built, expected = build_projection(snapshot), build_projection(fresh)
    assert list(built.nodes(data=True)) == list(expected.nodes(data=True))
    assert list(built.edges(data=True)) == list(expected.edges(data=True))
    assert isinstance(snapshot.incidents, start_snapshot.RecordParts) and snapshot.incidents.validated == 0


def test_chunk_columns_read_from_the_snapshot_equal_the_chunks_made_from_the_files(tmp_path: Path, data_dir: Path) -> None:
    """What the similarity artefact's key reads (incident, kind, digest of every chunk) is the same whether the
    chunks were made at this start or read as columns from the snapshot, so a restart finds the artefact again."""
    from incidentlib.search.chunks import ChunkTable, chunk_digests, chunk_incident_ids, chunk_kinds

    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    made = list(_started(root, cache)._search_engine.chunks)
    table = _open(root, cache)._search_engine.chunks
    assert isinstance(table, ChunkTable)
    for column in (chunk_incident_ids, chunk_kinds, chunk_digests):
        assert list(column(table)) == list(column(made)) and len(set(column(made))) > 1


def test_threads_reading_one_part_get_the_same_records(tmp_path: Path, data_dir: Path) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    records = _open(root, cache).data.incidents
    barrier = threading.Barrier(8)
    seen: list[object] = []

    def read() -> None:
        barrier.wait()
        seen.append(records["IL-0025"])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(record is seen[0] for record in seen)


def test_a_part_that_does_not_validate_is_named(tmp_path: Path) -> None:
    good = b'[{"id": "IL-0001"}]'
    records = start_snapshot.RecordParts(good, ["IL-0001"], [(0, len(good))], "/cache/start/k.snap")
    with pytest.raises(start_snapshot.SnapshotRecordsError, match=r"/cache/start/k\.snap: records part 0 does not validate"):
        records["IL-0001"]
    with pytest.raises(ValueError, match="segment sizes"):
        start_snapshot.RecordParts(good, ["IL-0001", "IL-0002"] * 2000, [(0, len(good))], "k.snap")


def test_a_write_after_a_start_from_the_snapshot_reads_and_cuts_only_the_changed_incident(
        tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The records and chunks after a write are the snapshot's with the written incident's laid over them: no other
    record is validated, no other chunk is cut, and the engine's chunks, the records and a search agree with a library
    that loads the same content from scratch."""
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # a part per record: what is read is countable
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    _started(root, cache)
    library = _open(root, cache)
    parts = library.data.incidents
    assert isinstance(parts, start_snapshot.RecordParts) and library.data.chunks is not None
    before = {incident_id: list(chunks) for incident_id, chunks in library.data.chunks.items()}
    assert library._search_engine.lexical is not None  # built before the write: the write updates it
    assert parts.validated == 0
    record = library.record("IL-0025")
    library.update_incident("IL-0025", {"severity": "sev2", "summary": {"en": "A wombatfjord summary."}}, record.etag)
    draft = library.create_draft({"title": {"en": "A draft about a wombatfjord"}, "org": "imbue",
                                  "summary": {"en": "A draft."}, "body": {"en": "The body."},
                                  "sources": [{"url": "https://example.com/x", "title": "X"}]})
    assert isinstance(library.data.incidents, OverlaidRecords) and library.data.incidents.base is parts
    assert list(library.data.incidents) == sorted([*IDS, draft.id])
    after = library._search_engine.chunks
    assert library.data.chunks is not None and isinstance(after, ChunkTable)  # carried: no chunk list was made
    assert parts.validated == 1  # IL-0025, read for the update itself; no other record
    by_incident: dict[str, list[Chunk]] = {}
    for chunk in after:
        by_incident.setdefault(chunk.incident_id, []).append(chunk)
    assert set(by_incident) == {*IDS, draft.id}
    for incident_id in IDS:
        if incident_id != "IL-0025":
            assert by_incident[incident_id] == before[incident_id]
    assert parts.validated == 1
    fresh = load_library(root)  # the YAML base; the overlay laid over it by a library opened without a cache
    reopened = Library.open(root, SearchConfig(cache_dir=tmp_path / "other-cache"))
    assert [chunk.text for chunk in by_incident["IL-0025"]] == [c.text for c in incident_chunks(reopened.get("IL-0025"), fresh.vocab)]
    assert by_incident[draft.id] == incident_chunks(reopened.get(draft.id), fresh.vocab)
    assert list(after) == list(reopened._search_engine.chunks)
    assert [hit.id for hit in library.search("wombatfjord", mode="lexical").results] == \
        [hit.id for hit in reopened.search("wombatfjord", mode="lexical").results] and draft.id in {
            hit.id for hit in library.search("wombatfjord", mode="lexical").results}
    assert [i.id for i in each_record(library.data.incidents)] == list(library.data.incidents)  # a scan, in id order
    # the BM25 index was updated from the previous one, which is then not held beside it
    assert library._search_engine.lexical_source == "updated" and library._lexical_carry is None
    assert library._search_engine._previous_lexical is None
    assert library.get("IL-0025").severity == reopened.get("IL-0025").severity
