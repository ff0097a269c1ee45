"""Index rows named by two 64-bit words (incidentlib.search.row_keys) and the store paths built on them: matching in
bulk agrees with matching tuples, a grown index records its row order, and a start reuses it without reading a row."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib.loader import load_library
from incidentlib.row_sequence import GatheredRows, LineColumn
from incidentlib.search import store
from incidentlib.search.chunks import Chunk
from incidentlib.search.engine import SearchConfig, SearchEngine, SearchMode
from incidentlib.search.row_keys import RowKeys, digest_words, id_hashes, match
from incidentlib.search.store import ensure_index, row_map_name, store_dir

#: Content hashes as a library's are (hex: a build folder is named after the first 16 digits).
CONTENT_1, CONTENT_2 = (hashlib.sha256(name.encode()).hexdigest() for name in ("content-1", "content-2"))
IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002"]


def digest(chunk_id: str, text: str) -> str:
    return hashlib.sha256(f"{chunk_id}\0{text}".encode()).hexdigest()[:16]


def keys(pairs: list[tuple[str, str]]) -> RowKeys:
    found = RowKeys.of([i for i, _ in pairs], [d for _, d in pairs])
    assert found is not None
    return found


def test_digest_words_read_sixteen_hex_digits_and_refuse_anything_else() -> None:
    assert digest_words(["0000000000000001", "ffffffffffffffff"]).tolist() == [1, 2**64 - 1]  # type: ignore[union-attr]
    assert digest_words([]).tolist() == []  # type: ignore[union-attr]
    for bad in (["abc"], ["0000000000000001", "00000000000000012"], ["000000000000000g"], ["00000000000000é"],
                ["00000000000000", "000000000000000000"],  # 14 + 18 digits, right in total
                ["        00000000", "        0000000a"]):  # spaces, which ``bytes.fromhex`` skips
        assert digest_words(bad) is None, bad
    joined = "\n".join(["0123456789abcdef", "fedcba9876543210"]).encode()
    column = LineColumn(joined, 0, len(joined), 2)  # the start snapshot's column: read from its bytes
    assert digest_words(column).tolist() == [0x0123456789ABCDEF, 0xFEDCBA9876543210]  # type: ignore[union-attr]


def test_id_hashes_are_the_same_from_a_list_and_from_a_column_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib.search import row_keys

    monkeypatch.setattr(row_keys, "KEY_BLOCK", 3)
    ids = [f"IL-{n:04d}/body/ko/{n % 2}" for n in range(10)] + ["장애/본문"]
    joined = "\n".join(ids).encode()
    from_column = id_hashes(LineColumn(joined, 0, len(joined), len(ids)))
    assert from_column.tolist() == id_hashes(ids).tolist() and len(set(from_column.tolist())) == len(ids)
    import xxhash

    odd = ["a\nb", "c", "d\n"]  # line breaks inside ids: still one hash per id
    assert id_hashes(odd).tolist() == [xxhash.xxh3_64_intdigest(i.encode()) for i in odd]


def test_matching_in_bulk_agrees_with_a_dict_of_tuples() -> None:
    rng = np.random.default_rng(3)
    old = [(f"c{n}", digest(f"c{n}", f"text {n}")) for n in range(300)]
    old += [old[5], old[17]]  # a key held twice: the last row holding it wins, as in a dict
    new = [old[int(i)] for i in rng.permutation(300)[:200]]
    new += [(f"c{n}", digest(f"c{n}", f"edited {n}")) for n in range(20)]  # same id, other text
    new += [(f"other{n}", old[n][1]) for n in range(5)]  # same digest under another id: not the same row
    new += [(f"fresh{n}", digest(f"fresh{n}", "t")) for n in range(7)]
    expected = {key: row for row, key in enumerate(old)}
    found = match(keys(old), keys(new))
    assert found.tolist() == [expected.get(key, -1) for key in new]
    assert found[new.index(old[5])] == 300 and found[new.index(old[17])] == 301
    assert match(keys([]), keys(new)).tolist() == [-1] * len(new)
    assert match(keys(old), keys([])).tolist() == []


def test_gathered_rows_read_as_the_list_they_stand_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib import row_sequence

    monkeypatch.setattr(row_sequence, "GATHER_BLOCK", 2)
    base = ["a", "b", "c", "d", "e"]
    rows = GatheredRows(base, np.array([4, 0, 3, 1, 2]))
    assert list(rows) == ["e", "a", "d", "b", "c"] == rows and rows[-1] == "c" and rows[1:3] == ["a", "d"]
    assert rows != ["e", "a"] and len(rows) == 5
    with pytest.raises(ValueError, match="outside the 5 rows"):
        GatheredRows(base, np.array([0, 5]))


@pytest.fixture()
def small(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "small", data_dir, IDS)


def grown(chunks: list[Chunk], at: int, count: int) -> list[Chunk]:
    """``chunks`` with ``count`` new chunks put in at position ``at`` (not at the end: the rows go out of order)."""
    new = [Chunk(f"IL-9999/detail/en/{n}", "IL-9999", "detail", "en", f"A new passage number {n} about NVLink.")
           for n in range(count)]
    return chunks[:at] + new + chunks[at:]


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_a_grown_index_records_its_row_order_and_the_next_start_reads_no_row(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    embedder = HashEmbedder()
    data = load_library(small)
    cache = tmp_path / "cache"
    engine = SearchEngine(data, SearchConfig(cache_dir=cache), embedder)
    chunks = list(engine.chunks)
    thresholds = {"hnsw_threshold": 1, "ivf_threshold": 10**9} if kind == "hnsw" else {"hnsw_threshold": 1, "ivf_threshold": 1}
    first, report = ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), **thresholds)
    assert report.action == "built" and first.meta.index_kind == kind and first.rows_are_chunks

    bigger = grown(chunks, 10, 3)
    folder = store_dir(cache, CONTENT_2, embedder)
    encoded = embedder.documents_encoded
    second, report = ensure_index(bigger, CONTENT_2, embedder, folder, **thresholds)
    assert report.action == "extended" and embedder.documents_encoded - encoded == 3
    assert second.row_chunks is not None and not second.rows_are_chunks
    # the donor's rows first, in their order, then the new chunks
    assert second.row_chunks.tolist() == [*range(10), *range(13, len(bigger)), 10, 11, 12]
    assert list(second.chunk_ids) == [chunks[i].id for i in range(len(chunks))] + [c.id for c in bigger[10:13]]
    build = folder / second.meta.build
    rows = [json.loads(line) for line in (build / store.ROWS_FILE).read_text(encoding="utf-8").splitlines()]
    assert rows == [store.index_row(bigger[i]) for i in second.row_chunks.tolist()]
    assert second.meta.chunks_digest == store.rows_digest([c.id for c in bigger], [c.digest for c in bigger])
    assert np.load(build / row_map_name(second.meta.chunks_digest)).tolist() == second.row_chunks.tolist()
    assert second.meta.rows_digest == ""  # found by its row map, never by the rows' own order

    read: list[int] = []
    real = store._row_columns
    monkeypatch.setattr(store, "_row_columns", lambda lines, before=0: read.append(len(lines)) or real(lines, before))
    again, report = ensure_index(bigger, CONTENT_2, embedder, folder, **thresholds)
    assert report.action == "reused" and read == [] and again.row_chunks is not None
    assert np.array_equal(again.row_chunks, second.row_chunks) and np.array_equal(again.vectors, second.vectors)

    # the vector of each chunk is the one a fresh build gives it
    fresh, _ = ensure_index(bigger, CONTENT_2, HashEmbedder(), store_dir(tmp_path / "fresh", CONTENT_2, embedder),
                            **thresholds)
    by_row = np.asarray(again.index.vectors)[np.argsort(again.row_chunks)]
    assert np.allclose(by_row, np.asarray(fresh.index.vectors), atol=1e-6)


def test_a_damaged_row_map_costs_a_read_of_the_rows_not_the_index(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The map is only a shortcut: when it fails its checks the verified rows are read and matched, the order is
    recorded again, and nothing is embedded or rebuilt."""
    embedder = HashEmbedder()
    data = load_library(small)
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(data, SearchConfig(cache_dir=cache), embedder).chunks)
    ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), hnsw_threshold=1)
    bigger = grown(chunks, 0, 2)
    folder = store_dir(cache, CONTENT_2, embedder)
    second, _ = ensure_index(bigger, CONTENT_2, embedder, folder, hnsw_threshold=1)
    path = folder / second.meta.build / row_map_name(second.meta.chunks_digest)
    path.unlink()
    np.save(path, np.zeros(len(bigger), dtype=np.int64))
    encoded = embedder.documents_encoded
    read: list[int] = []
    real = store._row_columns
    monkeypatch.setattr(store, "_row_columns", lambda lines, before=0: read.append(len(lines)) or real(lines, before))
    again, report = ensure_index(bigger, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert report.action == "reused" and report.warning is None and embedder.documents_encoded == encoded
    assert read and np.array_equal(again.row_chunks, second.row_chunks)  # type: ignore[arg-type]
    third, report = ensure_index(bigger, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert report.action == "reused" and len(read) == 1  # the order recorded again: the next start reads no row
    assert np.array_equal(third.row_chunks, second.row_chunks)  # type: ignore[arg-type]


def test_each_chunk_order_gets_its_own_row_map(small: Path, tmp_path: Path) -> None:
    """A start with the same chunks in another order records its own map beside the first, never over it: a start
    reading the first map meanwhile is never handed the other's bytes."""
    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(load_library(small), SearchConfig(cache_dir=cache), embedder).chunks)
    ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), hnsw_threshold=1)
    bigger = grown(chunks, 5, 1)
    folder = store_dir(cache, CONTENT_2, embedder)
    second, _ = ensure_index(bigger, CONTENT_2, embedder, folder, hnsw_threshold=1)
    first_map = folder / second.meta.build / row_map_name(second.meta.chunks_digest)
    before = first_map.read_bytes()
    reordered = list(reversed(bigger))
    other, report = ensure_index(reordered, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert report.action == "reused" and other.meta.chunks_digest != second.meta.chunks_digest
    assert first_map.read_bytes() == before
    assert (folder / other.meta.build / row_map_name(other.meta.chunks_digest)).exists()


def test_a_donor_removed_while_the_new_chunks_are_embedded_does_not_fail_the_build(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process may remove the donor's folder (superseded or evicted) during a long embedding: its rows file
    was opened before, and the grown build is still written whole."""
    import shutil

    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(load_library(small), SearchConfig(cache_dir=cache), embedder).chunks)
    donor = store_dir(cache, CONTENT_1, embedder)
    ensure_index(chunks, CONTENT_1, embedder, donor, hnsw_threshold=1)
    real = store._embed_resumably

    def embed_then_remove_the_donor(*args: object, **kwargs: object) -> int:
        resumed = real(*args, **kwargs)  # type: ignore[arg-type]
        shutil.rmtree(donor)
        return resumed

    monkeypatch.setattr(store, "_embed_resumably", embed_then_remove_the_donor)
    bigger = grown(chunks, 3, 2)
    folder = store_dir(cache, CONTENT_2, embedder)
    grown_index, report = ensure_index(bigger, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert report.action == "extended" and not donor.exists()
    rows = [json.loads(line) for line in (folder / grown_index.meta.build / store.ROWS_FILE).read_text().splitlines()]
    assert rows == [store.index_row(bigger[i]) for i in grown_index.row_chunks.tolist()]  # type: ignore[union-attr]


def test_an_engine_served_from_a_row_map_answers_as_from_a_fresh_build(small: Path, tmp_path: Path) -> None:
    """The library grows by a record whose chunks sort before others: the index is extended out of order, and the
    engine's row maps come from the recorded map; dense answers equal those of an engine on a fresh build."""
    import yaml

    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    config = SearchConfig(cache_dir=cache, hnsw_threshold=1)
    SearchEngine(load_library(small), config, embedder).build()
    source = small / "incidents" / "IL-0025.yaml"
    doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    doc["id"] = "IL-0000"
    (small / "incidents" / "IL-0000.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    engine = SearchEngine(load_library(small), config, embedder)
    report = engine.build()
    assert report.action == "extended" and engine.dense.row_chunks is not None and not engine._dense_state.identity
    fresh = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "fresh", hnsw_threshold=1),
                         HashEmbedder())
    fresh.build()
    assert fresh._dense_state.identity
    assert np.allclose(engine.chunk_vectors(), fresh.chunk_vectors(), atol=1e-6)
    total = len(engine.chunks)
    for start, end in ((0, 5), (3, total), (total - 2, total)):  # a block's vectors, gathered from the rows or sliced
        assert np.array_equal(engine.chunk_vector_block(start, end), engine.chunk_vectors()[start:end])
        assert np.array_equal(fresh.chunk_vector_block(start, end), fresh.chunk_vectors()[start:end])
    for query in ("NCCL watchdog timeout", "InfiniBand link flaps", "GPU driver Xid 79"):
        assert engine.search(query, k=5, mode=SearchMode.dense) == fresh.search(query, k=5, mode=SearchMode.dense)


def edited(chunks: list[Chunk], at: list[int]) -> list[Chunk]:
    """``chunks`` with the text of those at ``at`` changed (same ids: edited passages)."""
    return [Chunk(c.id, c.incident_id, c.kind, c.lang, c.text + " (edited)") if i in at else c
            for i, c in enumerate(chunks)]


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_an_edit_leaves_the_old_row_dead_and_appends_the_new_one(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(load_library(small), SearchConfig(cache_dir=cache), embedder).chunks)
    thresholds = {"hnsw_threshold": 1, "ivf_threshold": 10**9} if kind == "hnsw" else {"hnsw_threshold": 1, "ivf_threshold": 1}
    ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), **thresholds)
    changed = edited(chunks, [3, 20])
    folder = store_dir(cache, CONTENT_2, embedder)
    encoded = embedder.documents_encoded
    second, report = ensure_index(changed, CONTENT_2, embedder, folder, **thresholds)
    assert report.action == "updated" and report.embedded == 2 == embedder.documents_encoded - encoded
    assert second.row_chunks is not None and second.meta.chunks == len(chunks) + 2 == len(second.index)
    expected = list(range(len(chunks)))
    expected[3] = expected[20] = -1
    assert second.row_chunks.tolist() == [*expected, 3, 20]
    assert second.chunk_ids[3] == "" and second.chunk_ids[-2] == changed[3].id and second.meta.rows_digest == ""
    # the dead rows are the old texts' rows in the file; the map says they name no chunk
    rows = [json.loads(line) for line in (folder / second.meta.build / store.ROWS_FILE).read_text().splitlines()]
    assert rows[3] == store.index_row(chunks[3]) and rows[-2] == store.index_row(changed[3])

    read: list[int] = []
    real = store._row_columns
    monkeypatch.setattr(store, "_row_columns", lambda lines, before=0: read.append(len(lines)) or real(lines, before))
    again, report = ensure_index(changed, CONTENT_2, embedder, folder, **thresholds)
    assert report.action == "reused" and read == [] and np.array_equal(again.row_chunks, second.row_chunks)  # type: ignore[arg-type]


def test_an_index_that_would_hold_too_many_dead_rows_is_built_again(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(load_library(small), SearchConfig(cache_dir=cache), embedder).chunks)
    ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), hnsw_threshold=1)
    # just over the share: dead / (rows + appended) > MAX_DEAD_SHARE
    count = int(store.MAX_DEAD_SHARE * len(chunks) / (1 - store.MAX_DEAD_SHARE)) + 1
    changed = edited(chunks, list(range(count)))
    rebuilt, report = ensure_index(changed, CONTENT_2, embedder, store_dir(cache, CONTENT_2, embedder), hnsw_threshold=1)
    assert report.action == "updated" and report.embedded == count
    assert rebuilt.row_chunks is None and rebuilt.rows_are_chunks and len(rebuilt.index) == len(chunks)
    # one fewer, from the same first build (in a cache of its own), stays under it: the index grows with dead rows
    other = tmp_path / "other"
    ensure_index(chunks, CONTENT_1, embedder, store_dir(other, CONTENT_1, embedder), hnsw_threshold=1)
    fewer = edited(chunks, list(range(count - 1)))
    grown_index, _ = ensure_index(fewer, CONTENT_2, embedder, store_dir(other, CONTENT_2, embedder), hnsw_threshold=1)
    assert grown_index.row_chunks is not None and int((grown_index.row_chunks < 0).sum()) == count - 1


def test_an_engine_on_an_index_with_dead_rows_answers_as_on_a_fresh_build(small: Path, tmp_path: Path) -> None:
    """An edited record: the engine serves the grown index (old rows dead) through the row map, dense answers and
    each chunk's vector equal a fresh build's, and a live write carried from it sees the dead rows as dead."""
    import yaml

    embedder = HashEmbedder()
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=1)
    SearchEngine(load_library(small), config, embedder).build()
    path = small / "incidents" / "IL-0025.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["title"] = {"en": "Building a 4,088-GPU cluster: the InfiniBand fabric first", **{
        k: v for k, v in doc["title"].items() if k != "en"}}
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    engine = SearchEngine(load_library(small), config, embedder)
    report = engine.build()
    assert report.action == "updated" and engine.dense.row_chunks is not None
    assert int((engine.dense.row_chunks < 0).sum()) >= 1
    fresh = SearchEngine(load_library(small), SearchConfig(cache_dir=tmp_path / "fresh", hnsw_threshold=1),
                         HashEmbedder())
    fresh.build()
    assert np.allclose(engine.chunk_vectors(), fresh.chunk_vectors(), atol=1e-6)
    for query in ("InfiniBand fabric first", "NCCL watchdog timeout", "GPU driver Xid 79"):
        assert engine.search(query, k=5, mode=SearchMode.dense) == fresh.search(query, k=5, mode=SearchMode.dense)
    snapshot = engine.dense_snapshot()
    assert snapshot is not None and snapshot.dead == int((engine.dense.row_chunks < 0).sum())
    stats = engine.stats()
    assert stats.dense_dead_rows == snapshot.dead and stats.dense_rows == len(engine.chunks) + snapshot.dead


def test_a_rebuild_drops_the_dead_rows_and_embeds_nothing(small: Path, tmp_path: Path) -> None:
    embedder = HashEmbedder()
    cache = tmp_path / "cache"
    chunks = list(SearchEngine(load_library(small), SearchConfig(cache_dir=cache), embedder).chunks)
    ensure_index(chunks, CONTENT_1, embedder, store_dir(cache, CONTENT_1, embedder), hnsw_threshold=1)
    changed = edited(chunks, [2, 7])
    folder = store_dir(cache, CONTENT_2, embedder)
    grown_index, _ = ensure_index(changed, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert grown_index.row_chunks is not None and int((grown_index.row_chunks < 0).sum()) == 2
    encoded = embedder.documents_encoded
    clean, report = ensure_index(changed, CONTENT_2, embedder, folder, hnsw_threshold=1, rebuild=True)
    assert report.action == "refreshed" and report.embedded == 0 and embedder.documents_encoded == encoded
    assert clean.row_chunks is None and clean.rows_are_chunks and len(clean.index) == len(changed)
    by_chunk = np.asarray(grown_index.index.vectors)[np.argsort(grown_index.row_chunks)[2:]]  # the live rows, by chunk
    assert np.allclose(np.asarray(clean.index.vectors), by_chunk, atol=1e-6)
    again, report = ensure_index(changed, CONTENT_2, embedder, folder, hnsw_threshold=1)
    assert report.action == "reused" and again.rows_are_chunks  # the clean build is what the next start serves
