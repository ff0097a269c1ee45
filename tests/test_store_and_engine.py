"""Unit tests of the index store and the search engine with an instant fake embedder (real FAISS, real BM25)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import seed_tagger, small_library
from fakes import HashEmbedder

from incidentlib import Library
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.search.engine import SearchEngine, SearchMode
from incidentlib.search.store import ensure_index, index_row, store_dir

IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002"]


@pytest.fixture()
def small(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "small", data_dir, IDS)


def engine_for(root: Path, cache: Path, embedder: HashEmbedder | None = None) -> SearchEngine:
    return SearchEngine(load_library(root), SearchConfig(cache_dir=cache), embedder or HashEmbedder())


def test_store_builds_then_reuses_then_extends(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    data = load_library(small)
    engine = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    folder = store_dir(tmp_path / "cache", data.content_hash, embedder)
    loaded, report = ensure_index(engine.chunks, data.content_hash, embedder, folder, library=str(small))
    assert report.action == "built" and report.embedded == len(engine.chunks) == embedder.documents_encoded
    rows = [json.loads(line) for line in (folder / loaded.meta.build / "chunks.jsonl").read_text().splitlines()]
    assert rows == [index_row(c) for c in engine.chunks]  # typed rows, in row order
    again, second = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert second.action == "reused" and embedder.documents_encoded == len(engine.chunks)
    assert again.chunk_ids == loaded.chunk_ids and np.array_equal(again.vectors, loaded.vectors)

    # one chunk more: only it is embedded, the index is extended in place
    edited = small / "incidents" / "IL-0025.yaml"
    doc = yaml.safe_load(edited.read_text(encoding="utf-8"))
    doc["lessons"] = [*doc.get("lessons", []), {"en": "Check the fabric before blaming NCCL.",
                                                "ko": "NCCL을 탓하기 전에 패브릭을 확인한다."}]
    edited.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    data2 = load_library(small)
    engine2 = SearchEngine(data2, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    before = embedder.documents_encoded
    folder2 = store_dir(tmp_path / "cache", data2.content_hash, embedder)
    assert folder2 != folder  # keyed by content: the edit makes a new folder, the old one lends its vectors
    _, third = ensure_index(engine2.chunks, data2.content_hash, embedder, folder2, library=str(small))
    changed = len(engine2.chunks) - len(engine.chunks)
    assert third.action in ("extended", "updated") and third.embedded == embedder.documents_encoded - before
    assert 0 < third.embedded <= changed + 2  # the new lesson, plus at most the chunks that now read differently


def test_a_build_of_the_same_chunks_in_the_same_order_is_reused_without_parsing_its_rows(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib.search import store

    embedder = HashEmbedder()
    data = load_library(small)
    engine = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    folder = store_dir(tmp_path / "cache", data.content_hash, embedder)
    built, _ = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert built.meta.rows_digest == store.rows_digest([c.id for c in engine.chunks], [c.digest for c in engine.chunks])

    parsed: list[int] = []
    real_columns = store._row_columns
    monkeypatch.setattr(store, "_row_columns", lambda lines, before=0: parsed.append(len(lines)) or real_columns(lines, before))
    again, report = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert report.action == "reused" and parsed == [] and again.rows_are_chunks
    assert list(again.chunk_ids) == list(built.chunk_ids) and list(again.digests) == [c.digest for c in engine.chunks]
    assert np.array_equal(again.vectors, built.vectors)

    # the same chunks in another order: another digest, so the rows are read and matched, and the order found is
    # recorded (the chunks' digest and each row's chunk position) for the next start with these chunks
    reordered = list(reversed(engine.chunks))
    other, report = ensure_index(reordered, data.content_hash, embedder, folder)
    assert report.action == "reused" and parsed == [len(engine.chunks)] and not other.rows_are_chunks
    assert list(other.chunk_ids) == list(built.chunk_ids)  # row order is the file's
    assert other.row_chunks is not None and other.row_chunks.tolist() == list(range(len(reordered)))[::-1]
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["chunks_digest"] == store.rows_digest([c.id for c in reordered], [c.digest for c in reordered])
    assert meta["rows_digest"] == built.meta.rows_digest  # still the rows' own, in file order
    third, report = ensure_index(reordered, data.content_hash, embedder, folder)
    assert report.action == "reused" and parsed == [len(engine.chunks)]  # the recorded map: no row read
    assert third.row_chunks is not None and np.array_equal(third.row_chunks, other.row_chunks)

    # an engine on the reused build: identity row maps, and the same answers as with the maps computed
    fast = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    fast.build()
    assert fast._dense_state.identity and parsed == [len(engine.chunks)]
    query = "NCCL watchdog timeout"
    from incidentlib.search import engine as engine_module

    for module in (store, engine_module):  # the row-by-row path
        monkeypatch.setattr(module, "rows_digest", lambda ids, digests: "no match")
    slow = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    slow.build()
    assert parsed == [len(engine.chunks)] * 2 and slow._dense_state.identity
    assert fast.search(query, k=5, mode=SearchMode.dense) == slow.search(query, k=5, mode=SearchMode.dense)


def test_a_build_without_a_rows_digest_is_still_reused(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    data = load_library(small)
    engine = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    folder = store_dir(tmp_path / "cache", data.content_hash, embedder)
    ensure_index(engine.chunks, data.content_hash, embedder, folder)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    meta.pop("rows_digest")  # as written before the digest existed
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    again, report = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert report.action == "reused" and embedder.documents_encoded == len(engine.chunks) and again.rows_are_chunks
    # that start verified the rows and recorded their digest: the next one takes the fast path
    third, report = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert report.action == "reused" and third.rows_are_chunks and third.meta.rows_digest.startswith("xxh3_128:")


def test_store_rejects_a_corrupt_row_file(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    data = load_library(small)
    engine = SearchEngine(data, SearchConfig(cache_dir=tmp_path / "cache"), embedder)
    folder = store_dir(tmp_path / "cache", data.content_hash, embedder)
    loaded, _ = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    (folder / loaded.meta.build / "chunks.jsonl").write_text('{"id": 1}\n' * len(engine.chunks), encoding="utf-8")
    _, report = ensure_index(engine.chunks, data.content_hash, embedder, folder)
    assert report.action == "built"  # unreadable rows are never trusted


def test_engine_modes_and_allowed(small: Path, tmp_path: Path) -> None:
    engine = engine_for(small, tmp_path / "cache")
    engine.build()
    assert engine.last_build is not None and engine.last_build.embedder == "fake-hash"
    for mode in SearchMode:
        hits = engine.search("NCCL watchdog timeout", k=3, mode=mode)
        assert 1 <= len(hits) <= 3
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len({h.incident_id for h in hits}) == len(hits)
    only = {"IL-0001", "IL-0002"}
    assert {h.incident_id for h in engine.search("NCCL watchdog timeout", k=5, allowed=only)} <= only


def test_rebuild_resets_the_row_maps(small: Path, tmp_path: Path) -> None:
    engine = engine_for(small, tmp_path / "cache")
    engine.build()
    first = engine.search("outage", k=3, mode=SearchMode.dense)
    rows_before = engine._row_maps
    engine.build()  # a second build replaces the index: cached row maps must follow it
    assert engine._row_maps is not rows_before
    assert [h.incident_id for h in engine.search("outage", k=3, mode=SearchMode.dense)] == [h.incident_id for h in first]


def test_library_with_a_given_embedder(small: Path, tmp_path: Path, hashed_tagger: Path) -> None:
    cache = seed_tagger(hashed_tagger, tmp_path / "cache")
    library = Library(load_library(small), SearchConfig(cache_dir=cache), embedder=HashEmbedder())
    assert library.embedder == "fake-hash"
    report = library.build_index()
    assert report.action == "built" and library.last_build == report
    response = library.similar(text="NCCL watchdog caught collective operation timeout", k=3)
    assert response.results and all(r.id in IDS for r in response.results)
    assert response.results[0].score == pytest.approx(max(r.score for r in response.results))
    by_incident = library.similar(incident_id="IL-0025", k=3)
    assert "IL-0025" not in {r.id for r in by_incident.results}
