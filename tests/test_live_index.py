"""The dense index after a change: carried (dead rows masked, new rows appended, nothing rewritten), then compacted.

Real numpy/FAISS indexes over a small library copy, with the instant hashed embedder (what is
tested is the index bookkeeping, not the model).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder
from test_store import draft

from incidentlib import Library
from incidentlib.loader import LibraryData, load_library
from incidentlib.search.engine import SearchConfig, SearchEngine, SearchMode
from incidentlib.search.layered import MAX_DEAD_SHARE, LayeredIndex
from incidentlib.search.store import PARTIAL_DIR, ensure_index, store_dir
from incidentlib.store import STORE_FILE

IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002", "IL-0070"]
QUERIES = ["NCCL watchdog timeout", "InfiniBand 링크 장애", "Xid 79 fell off the bus", "checkpoint storage stalled",
           "GPU 메모리 ECC 오류"]


def _changed(data: LibraryData) -> LibraryData:
    """One incident edited (its body), one removed, one added (a copy under a new id with another title)."""
    incidents = dict(data.incidents)
    edited = incidents["IL-0126"]
    incidents["IL-0126"] = edited.model_copy(update={"body": edited.body.model_copy(
        update={"en": "The storage tier stalled every checkpoint for an hour."})})
    incidents.pop("IL-0002")
    twin = incidents["IL-0025"]
    incidents["IL-0999"] = twin.model_copy(update={"id": "IL-0999", "related": [], "title": twin.title.model_copy(
        update={"en": "Checkpoint storage stalled the NCCL job"})})
    return replace(data, incidents=dict(sorted(incidents.items())), content_hash=data.content_hash + "+change")


def _ranking(engine: SearchEngine, query: str) -> list[tuple[str, int, float]]:
    vector = engine.embedder.encode_queries([query])[0]
    return [(i, c, round(s, 5)) for i, s, c in engine.rank_dense_vector(vector, depth=6)]


@pytest.mark.parametrize("threshold", [10**9, 1], ids=["exact", "hnsw"])
def test_a_carried_index_ranks_as_a_rebuilt_one_and_compacts_without_embedding(
        tmp_path: Path, data_dir: Path, threshold: int) -> None:
    data = load_library(small_library(tmp_path / "lib", data_dir, IDS))
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=threshold)
    embedder = HashEmbedder()
    first = SearchEngine(data, config, embedder)
    first.build()
    after = _changed(data)
    embedded_before = embedder.documents_encoded
    carried = SearchEngine(after, config, embedder, previous_dense=first.dense_snapshot())
    index = carried.dense.index
    assert isinstance(index, LayeredIndex) and index.base is first.dense.index  # shared, not copied or rewritten
    assert carried.last_build is not None and carried.last_build.action == "carried"
    changed_chunks = {(c.id, c.digest) for c in carried.chunks} - {(c.id, c.digest) for c in first.chunks}
    assert carried.last_build.embedded == len(changed_chunks) == embedder.documents_encoded - embedded_before > 0
    assert carried.needs_compaction
    dead = carried.dense_snapshot().dead  # type: ignore[union-attr]
    assert dead == len({(c.id, c.digest) for c in first.chunks} - {(c.id, c.digest) for c in carried.chunks}) > 0
    assert not any(engine_path.name.startswith(after.content_hash[:16])
                   for engine_path in (tmp_path / "cache").rglob("build-*"))  # nothing was written for the carry

    rebuilt = SearchEngine(after, SearchConfig(cache_dir=tmp_path / "other-cache", hnsw_threshold=threshold), HashEmbedder())
    rebuilt.build()
    for query in QUERIES:
        assert _ranking(carried, query) == _ranking(rebuilt, query)
        assert [h.incident_id for h in carried.search(query, k=5, mode=SearchMode.hybrid)] == \
            [h.incident_id for h in rebuilt.search(query, k=5, mode=SearchMode.hybrid)]
    assert np.allclose(carried.chunk_vectors(), rebuilt.chunk_vectors())
    assert "IL-0002" not in {i for q in QUERIES for i, _, _ in _ranking(carried, q)}  # removed: its rows are dead

    embedded_before = embedder.documents_encoded
    report = carried.compact()
    assert report is not None and report.action == "compacted" and report.embedded == 0
    assert embedder.documents_encoded == embedded_before  # the carried vectors were written, not re-embedded
    assert not carried.needs_compaction and not isinstance(carried.dense.index, LayeredIndex)
    row_chunks = carried.dense.row_chunks
    if threshold == 1:  # the HNSW graph on disk was extended: the carry's dead rows stay dead in it, none is lost
        assert row_chunks is not None and int((row_chunks < 0).sum()) == dead
        assert len(carried.dense.chunk_ids) == len(carried.chunks) + dead
    else:  # an exact index is written anew from the vectors: the dead rows are gone
        assert len(carried.dense.chunk_ids) == len(carried.chunks)
    for query in QUERIES:
        assert _ranking(carried, query) == _ranking(rebuilt, query)
    assert carried.compact() is None  # nothing left to do

    restarted = SearchEngine(after, config, embedder)  # a restart or another process finds the clean index
    assert restarted.build().action == "reused" and embedder.documents_encoded == embedded_before


def test_a_change_that_kills_most_rows_compacts_at_once(tmp_path: Path, data_dir: Path) -> None:
    data = load_library(small_library(tmp_path / "lib", data_dir, IDS))
    config = SearchConfig(cache_dir=tmp_path / "cache")
    embedder = HashEmbedder()
    first = SearchEngine(data, config, embedder)
    first.build()
    kept = dict(list(data.incidents.items())[:2])
    shrunk = replace(data, incidents=kept, content_hash=data.content_hash + "+shrunk")
    assert len(kept) / len(data.incidents) < 1 - MAX_DEAD_SHARE
    encoded = embedder.documents_encoded
    engine = SearchEngine(shrunk, config, embedder, previous_dense=first.dense_snapshot())
    assert not engine.needs_compaction and not isinstance(engine.dense.index, LayeredIndex)
    assert engine.last_build is not None and engine.last_build.action == "compacted"
    assert embedder.documents_encoded == encoded and len(engine.dense.chunk_ids) == len(engine.chunks)


def test_writes_to_a_live_library_carry_the_index_and_compaction_tidies_it(tmp_path: Path, data_dir: Path) -> None:
    root = small_library(tmp_path / "lib", data_dir, IDS)
    embedder = HashEmbedder()
    library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), embedder=embedder)
    library.search("NCCL watchdog timeout")
    library.prepare_search()
    assert not library.needs_compaction
    cut_before = {chunk.id: chunk for chunk in library._search_engine.chunks}
    first = library.create_draft(draft("quokka"))
    second = library.create_draft(draft("wombat"))
    library.prepare_search()
    engine = library._search_engine
    assert engine.last_build is not None and engine.last_build.action == "carried"
    # the incidents the writes left alone keep their chunk objects: only the drafts were cut
    assert all(cut_before[c.id] is c for c in engine.chunks if c.incident_id not in {first.id, second.id})
    assert {c.incident_id for c in engine.chunks if c.id not in cut_before} == {first.id, second.id}
    assert library.needs_compaction
    assert [r.id for r in library.search("wombat", mode="dense").results][:1] == [second.id]
    assert first.id in {r.id for r in library.search("quokka storage", mode="dense", k=5).results}

    report = library.compact()
    assert report.dense == "compacted" and report.dense_rows == len(engine.chunks)
    assert report.wal_bytes_before > 0 and report.wal_bytes_after == 0  # the two writes were in the log
    assert not library.needs_compaction
    wal = root / f"{STORE_FILE}-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed and truncated
    assert [r.id for r in library.search("wombat", mode="dense").results][:1] == [second.id]
    assert library.compact().dense == "none"


@pytest.mark.parametrize("threshold", [10**9, 1], ids=["exact", "hnsw"])
def test_compaction_reports_the_dead_rows_it_dropped(tmp_path: Path, data_dir: Path, threshold: int) -> None:
    """An edit and a removal leave dead rows in the carried index: an exact index written anew drops them all, an
    HNSW graph on disk extended keeps them dead, and the report says which."""
    root = small_library(tmp_path / "lib", data_dir, IDS)
    library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=threshold),
                      embedder=HashEmbedder())
    library.search("NCCL watchdog timeout")
    record = library.create_draft(draft("quokka"))
    library.compact()  # the draft is on disk: its later edit leaves a dead row of the index written
    library.update_incident(record.id, {"body": {"en": "The wombat storage tier stopped answering."}}, record.etag)
    library.delete("IL-0002")
    library.prepare_search()
    engine = library._search_engine
    dead = engine.dense_snapshot().dead  # type: ignore[union-attr]
    assert engine.needs_compaction and dead > 0
    report = library.compact()
    assert report.dense == "compacted" and report.dense_rows == len(library._search_engine.chunks)
    row_chunks = library._search_engine.dense.row_chunks
    kept = 0 if row_chunks is None else int((row_chunks < 0).sum())
    assert (kept, report.dead_rows_dropped) == ((0, dead) if threshold > 1 else (dead, 0))


class _Interrupted(Exception):
    pass


class _FailingEmbedder(HashEmbedder):
    """Stops (as Ctrl-C or a killed process would) once ``limit`` documents were embedded."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.documents_encoded + len(texts) > self.limit:
            raise _Interrupted
        return super().encode_documents(texts)


def test_an_interrupted_build_resumes_from_its_last_checkpoint(tmp_path: Path, data_dir: Path) -> None:
    data = load_library(small_library(tmp_path / "lib", data_dir, IDS))
    chunks = SearchEngine(data, SearchConfig(), HashEmbedder()).chunks
    folder = store_dir(tmp_path / "cache", data.content_hash, HashEmbedder())
    segment = 16
    failing = _FailingEmbedder(limit=3 * segment + 5)  # three segments saved, the fourth cut short
    with pytest.raises(_Interrupted):
        ensure_index(chunks, data.content_hash, failing, folder, batch_size=8, segment=segment)
    assert len(list((folder / PARTIAL_DIR).glob("segment-*.npz"))) == 3
    assert not (folder / "meta.json").exists()  # nothing half-built is in service

    resumed_embedder = HashEmbedder()
    loaded, report = ensure_index(chunks, data.content_hash, resumed_embedder, folder, batch_size=8, segment=segment)
    assert report.action == "built" and report.resumed == 3 * segment
    assert report.embedded == resumed_embedder.documents_encoded == len(chunks) - 3 * segment
    assert not (folder / PARTIAL_DIR).exists()  # the checkpoints go once the build is whole
    clean, _ = ensure_index(chunks, data.content_hash, HashEmbedder(), tmp_path / "clean", batch_size=8)
    order = {chunk_id: row for row, chunk_id in enumerate(clean.chunk_ids)}
    assert np.allclose(loaded.vectors, clean.vectors[[order[c] for c in loaded.chunk_ids]])


def test_two_copies_written_differently_never_share_an_index(tmp_path: Path, data_dir: Path) -> None:
    """Content hashes of written libraries name the store, not only the change number: two scratch copies
    of one library, each with its own first write, get different hashes (so neither is served the other's
    cached vectors), while two processes on one store agree."""
    cache = tmp_path / "shared-cache"
    roots = [small_library(tmp_path / name, data_dir, IDS) for name in ("a", "b")]
    libraries = [Library(load_library(root), SearchConfig(cache_dir=cache), embedder=HashEmbedder()) for root in roots]
    records = [library.create_draft(draft(word)) for library, word in zip(libraries, ("quokka", "wombat"), strict=True)]
    assert records[0].id == records[1].id and libraries[0].change_seq == libraries[1].change_seq == 1
    assert libraries[0].data.content_hash != libraries[1].data.content_hash
    reports = [library.build_index() for library in libraries]
    assert reports[1].action != "reused"
    for library, word in zip(libraries, ("quokka", "wombat"), strict=True):
        engine = library._search_engine
        body = next(i for i, c in enumerate(engine.chunks) if c.incident_id == records[0].id and word in c.text)
        assert np.allclose(engine.chunk_vectors()[body], engine.embedder.encode_documents([engine.chunks[body].text])[0])
    twin = Library(load_library(roots[0]), SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    assert twin.data.content_hash == libraries[0].data.content_hash


def test_an_engine_replaced_by_a_write_is_freed_without_the_cyclic_collector(tmp_path: Path, data_dir: Path) -> None:
    """A replaced engine (its BM25 arrays: 1.2 GB at 100k incidents) goes when the library drops it: neither its
    backend nor the library keeps it, nor the postings it was updated from, even with the collector off."""
    import gc
    import weakref

    root = small_library(tmp_path / "lib", data_dir, ["IL-0001", "IL-0025", "IL-0101"])
    library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
    library.create_draft(draft("aardvark"))  # a first write: its imports and first-use caches are made here
    library.search("aardvark", mode=SearchMode.lexical)
    engine, postings = weakref.ref(library._search_engine), weakref.ref(library._search_engine.lexical.postings)
    assert engine().backend.engine.lexical is not None  # type: ignore[union-attr]  # the backend in use reaches its engine
    gc.disable()
    try:
        library.create_draft(draft("pangolin"))
        library.prepare_search()
        assert engine() is None and postings() is None
        assert library._search_engine.lexical_source == "updated"
    finally:
        gc.enable()


def test_compacting_a_carried_inverted_file_extends_the_build_on_disk(
        tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The carried index's base is the inverted file on disk: compaction appends the carried rows to a copy of it
    (read through the carried index, never stacked into one matrix, never embedded again) and keeps its trained
    lists, and the result ranks as a fresh build does."""
    from incidentlib.search.ivf import IvfIndex

    data = load_library(small_library(tmp_path / "lib", data_dir, IDS))
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=1, ivf_threshold=1)
    embedder = HashEmbedder()
    first = SearchEngine(data, config, embedder)
    first.build()
    assert isinstance(first.dense.index, IvfIndex)
    after = _changed(data)
    carried = SearchEngine(after, config, embedder, previous_dense=first.dense_snapshot())
    assert isinstance(carried.dense.index, LayeredIndex) and carried.needs_compaction  # carried on first use
    dead = carried.dense_snapshot().dead  # type: ignore[union-attr]

    def no_matrix(self: LayeredIndex) -> np.ndarray:
        raise AssertionError("compaction stacked the carried rows into one matrix")

    monkeypatch.setattr(LayeredIndex, "vectors", property(no_matrix))
    trained = IvfIndex.build
    monkeypatch.setattr(IvfIndex, "build", classmethod(lambda cls, *a, **k: pytest.fail("the lists were trained again")))
    encoded = embedder.documents_encoded
    report = carried.compact()
    assert report is not None and report.action == "compacted" and report.embedded == 0
    assert embedder.documents_encoded == encoded
    assert isinstance(carried.dense.index, IvfIndex) and carried.dense.row_chunks is not None
    assert int((carried.dense.row_chunks < 0).sum()) == dead
    monkeypatch.setattr(IvfIndex, "build", trained)

    fresh = SearchEngine(after, SearchConfig(cache_dir=tmp_path / "fresh", hnsw_threshold=1, ivf_threshold=1),
                         HashEmbedder())
    fresh.build()
    assert np.allclose(carried.chunk_vectors(), fresh.chunk_vectors(), atol=1e-6)
    restarted = SearchEngine(after, config, embedder)
    assert restarted.build().action == "reused" and embedder.documents_encoded == encoded
    for query in QUERIES:
        assert _ranking(restarted, query) == _ranking(carried, query)


def test_a_bm25_index_updated_by_writes_is_saved_once_not_at_each_write(tmp_path: Path, data_dir: Path) -> None:
    """A write updates the BM25 index in memory only; the server's shutdown (or compaction) saves it, and the next
    start loads it instead of tokenizing every chunk again."""
    root = small_library(tmp_path / "lib", data_dir, IDS)
    config = SearchConfig(cache_dir=tmp_path / "cache")
    library = Library(load_library(root), config, embedder=HashEmbedder())
    library.search("NCCL watchdog timeout")
    library.create_draft(draft("quokka"))
    library.prepare_search()
    engine = library._search_engine
    assert engine.lexical_source == "updated" and library.needs_compaction
    restarted = Library(load_library(root), config, embedder=HashEmbedder())
    restarted.search("quokka", mode="lexical")
    assert restarted._search_engine.lexical_source == "built"  # not saved by the write
    shutil.rmtree(tmp_path / "cache" / "lexical")  # what that start saved: the next must find the writer's
    library.save_pending_indexes()  # what `serve` does when it stops
    again = Library(load_library(root), config, embedder=HashEmbedder())
    assert [r.id for r in again.search("quokka", mode="lexical").results][:1] == \
        [r.id for r in library.search("quokka", mode="lexical").results][:1]
    assert again._search_engine.lexical_source == "loaded"
    assert library.compact().dense == "compacted"  # the dense carry is still the compaction's to write
