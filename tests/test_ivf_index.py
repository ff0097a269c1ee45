"""The inverted-file dense index (large libraries): recall against exact search, persistence, filters, the library path."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib import Library
from incidentlib.library import SearchConfig
from incidentlib.loader import load_library
from incidentlib.search import dense, ivf
from incidentlib.search.exact import ExactIndex
from incidentlib.search.ivf import CALIBRATION_RECALL, IvfIndex, list_count

IDS = ["IL-0025", "IL-0126", "IL-0133", "IL-0134", "IL-0021", "IL-0001", "IL-0002"]


def clustered(rows: int, dim: int = 32, centres: int = 40, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres: the structure real embeddings have, and what lists exploit."""
    rng = np.random.default_rng(seed)
    middle = rng.normal(size=(centres, dim))
    vectors = middle[rng.integers(0, centres, rows)] + 0.35 * rng.normal(size=(rows, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def recall_at_10(index: IvfIndex, exact: ExactIndex, queries: np.ndarray) -> float:
    found = 0
    for query in queries:
        found += len(set(index.search(query, 10)[1].tolist()) & set(exact.search(query, 10)[1].tolist()))
    return found / (10 * len(queries))


def test_the_inverted_file_reaches_its_calibrated_recall_and_scores_exactly(tmp_path: Path) -> None:
    everything = clustered(6100)
    vectors, fresh_queries = everything[:6000], everything[6000:]  # the queries are not rows: calibration never saw them
    index = dense.create(vectors, hnsw_threshold=10, ivf_threshold=6000)
    assert isinstance(index, IvfIndex) and index.kind == "ivf" and len(index) == 6000
    assert index.lists == list_count(6000) and 1 <= index.nprobe < index.lists  # calibration stopped early
    exact = ExactIndex(vectors)
    assert recall_at_10(index, exact, fresh_queries) >= CALIBRATION_RECALL - 0.05
    scores, ids = index.search(fresh_queries[0], 10)
    np.testing.assert_allclose(scores, vectors[ids] @ fresh_queries[0], rtol=1e-6)  # re-ranked with float32 vectors
    assert list(scores) == sorted(scores, reverse=True)

    folder = tmp_path / "ivf"
    folder.mkdir()
    assert sorted(index.save(folder)) == sorted(dense.files_for("ivf"))
    assert isinstance(index.vectors, np.memmap)  # after saving, served from the written file
    loaded = dense.load(folder, "ivf")
    assert isinstance(loaded, IvfIndex) and isinstance(loaded.vectors, np.memmap)
    assert loaded.nprobe == index.nprobe and loaded.lists == index.lists
    np.testing.assert_array_equal(loaded.vectors, vectors)
    for query in fresh_queries[:20]:
        np.testing.assert_array_equal(loaded.search(query, 10)[1], index.search(query, 10)[1])


def test_a_filtered_search_is_exact_over_the_allowed_rows() -> None:
    vectors = clustered(3000, seed=2)
    index = IvfIndex.build(vectors)
    exact = ExactIndex(vectors)
    rng = np.random.default_rng(3)
    allowed = np.sort(rng.choice(3000, 40, replace=False))
    for query in clustered(10, seed=4):
        got_scores, got = index.search(query, 5, allowed=allowed)
        want_scores, want = exact.search(query, 5, allowed=allowed)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-6)
    assert len(index.search(vectors[0], 5, allowed=np.array([], dtype=np.int64))[1]) == 0


def test_added_rows_are_found_without_retraining() -> None:
    vectors = clustered(4000, seed=5)
    index = IvfIndex.build(vectors[:3000])
    lists_before = index.lists
    grown = index.add(vectors[3000:])
    assert len(grown) == 4000 and grown.vectors.shape == (4000, 32)
    assert isinstance(grown, IvfIndex) and grown.lists == lists_before
    for row in (3000, 3500, 3999):
        assert grown.search(vectors[row], 1)[1][0] == row


def test_the_kind_follows_size() -> None:
    assert dense.kind_for(99, hnsw_threshold=100, ivf_threshold=1000) == "flat"
    assert dense.kind_for(100, hnsw_threshold=100, ivf_threshold=1000) == "hnsw"
    assert dense.kind_for(1000, hnsw_threshold=100, ivf_threshold=1000) == "ivf"
    assert list_count(1_300_000) == round(1_300_000 ** 0.5)
    assert list_count(500) == 500 // 64  # few rows: no list trained on fewer than its share of points


def test_a_library_above_the_threshold_builds_verifies_and_searches_an_inverted_file(tmp_path: Path, data_dir: Path) -> None:
    root = small_library(tmp_path / "small", data_dir, IDS)
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=10, ivf_threshold=20)
    library = Library(load_library(root), config, embedder=HashEmbedder())
    report = library.build_index()
    assert report.index_kind == "ivf" and report.action == "built"
    stats = library.index_stats()
    assert stats.dense_kind == "ivf" and stats.dense_index.startswith("IVF") and stats.ivf_threshold == 20
    hits = library.search("NCCL watchdog timeout", k=3, mode="dense")
    exact = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "exact"), embedder=HashEmbedder())
    want = exact.search("NCCL watchdog timeout", k=3, mode="dense")
    assert [h.id for h in hits.results] == [h.id for h in want.results]

    again = Library(load_library(root), config, embedder=HashEmbedder())
    assert again.build_index().action == "reused"  # verified from disk: checksums, rows, shapes
    assert [h.id for h in again.search("NCCL watchdog timeout", k=3, mode="dense").results] == [h.id for h in hits.results]

    folder = Path(report.path)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / meta["build"] / "vectors.npy").write_bytes(b"not a matrix")
    damaged = Library(load_library(root), config, embedder=HashEmbedder())
    rebuilt = damaged.build_index()
    assert rebuilt.action != "reused" and rebuilt.warning is not None and "checksum" in rebuilt.warning


def test_non_finite_vectors_are_never_written(tmp_path: Path) -> None:
    index = IvfIndex.build(clustered(700, seed=6))
    for bad in (np.nan, np.inf):
        index._vectors = clustered(700, seed=6)
        index._vectors[3, 0] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            index.save(tmp_path)
        assert not list(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.slow  # a library build twice: the fast subset must stay under a minute
def test_a_library_that_grows_extends_its_inverted_file(tmp_path: Path, data_dir: Path) -> None:
    root = small_library(tmp_path / "small", data_dir, IDS[:-1])
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=10, ivf_threshold=20)
    first = Library(load_library(root), config, embedder=HashEmbedder()).build_index()
    assert first.index_kind == "ivf"
    small_library(tmp_path / "one", data_dir, IDS[-1:])
    (root / "incidents" / f"{IDS[-1]}.yaml").write_bytes((tmp_path / "one" / "incidents" / f"{IDS[-1]}.yaml").read_bytes())
    grown = Library(load_library(root), config, embedder=HashEmbedder())
    report = grown.build_index()
    assert report.action == "extended" and report.index_kind == "ivf" and 0 < report.embedded < report.chunks
    title = load_library(root).incidents[IDS[-1]].title.en
    hits = grown.search(title, k=3, mode="dense")
    assert hits.results[0].id == IDS[-1]
    # the grown rows were written into the new build's own file, which the index serves (not appended in memory)
    folder = Path(report.path)
    served = folder / json.loads((folder / "meta.json").read_text())["build"] / "vectors.npy"
    index = grown._search_engine.dense.index
    assert isinstance(index, IvfIndex) and index._reader is not None  # read from a file, by pread
    assert os.fstat(index._reader.fd).st_ino == served.stat().st_ino  # the build's own file, renamed into place
    rows = index.vectors
    assert isinstance(rows, np.memmap) and len(rows) == report.chunks
    assert not [p for p in folder.iterdir() if p.name.startswith(".build-")]
    fresh = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "flat"), embedder=HashEmbedder())
    fresh.build_index()
    by_chunk = dict(zip(grown._search_engine.dense.chunk_ids, np.asarray(rows), strict=True))
    np.testing.assert_array_equal(np.stack([by_chunk[c.id] for c in fresh._search_engine.chunks]),
                                  fresh._search_engine.chunk_vectors())


def test_a_deep_search_rescores_only_its_head() -> None:
    everything = clustered(3100, seed=7)
    vectors, queries = everything[:3000], everything[3000:]
    index = IvfIndex.build(vectors)
    index._index.nprobe = index.lists  # every list: what remains to check is the scoring, not the probing
    exact = ExactIndex(vectors)
    for query in queries[:10]:
        scores, ids = index.search(query, 1000)
        want_scores, want = exact.search(query, 1000)
        assert list(scores) == sorted(scores, reverse=True) and len(set(ids.tolist())) == 1000
        np.testing.assert_allclose(scores, vectors[ids] @ query, atol=0.02)  # the tail keeps the codes' scores
        np.testing.assert_allclose(scores[:100], want_scores[:100], rtol=1e-6)  # the head is exact
        assert len(set(ids.tolist()) & set(want.tolist())) >= 980


def test_a_loaded_index_maps_its_lists_and_reads_a_copy_before_it_grows(tmp_path: Path) -> None:
    vectors = clustered(4000, seed=7)
    built = IvfIndex.build(vectors[:3000])
    folder = tmp_path / "ivf"
    folder.mkdir()
    built.save(folder)
    loaded = dense.load(folder, "ivf")
    assert isinstance(loaded, IvfIndex) and loaded.mapped and not built.mapped
    for query in vectors[3000:3010]:
        np.testing.assert_array_equal(loaded.search(query, 10)[1], built.search(query, 10)[1])
    # the file's name goes (a newer build replaced it) before the index grows: the copy comes from the open file
    (folder / "ivf.faiss").rename(tmp_path / "moved.faiss")
    (tmp_path / "moved.faiss").unlink()
    grown = loaded.add(vectors[3000:])
    assert isinstance(grown, IvfIndex) and not grown.mapped and len(grown) == 4000 and grown.nprobe == built.nprobe
    assert grown._index.parallel_mode == ivf.PARALLEL_OVER_QUERIES  # the owned copy shares a batch's queries too
    for row in (3000, 3500, 3999):
        assert grown.search(vectors[row], 1)[1][0] == row
    again = tmp_path / "again"
    again.mkdir()
    grown.save(again)
    reloaded = dense.load(again, "ivf")
    assert isinstance(reloaded, IvfIndex) and len(reloaded) == 4000 and reloaded.mapped
    np.testing.assert_array_equal(reloaded.search(vectors[3999], 5)[1], grown.search(vectors[3999], 5)[1])


def test_an_index_built_over_mapped_vectors_reads_them_in_blocks_and_saves_beside_them(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The build at 1M incidents: 27.5 GB of rows on disk, more than the machine's memory, are never copied whole."""
    import incidentlib.search.ivf as ivf

    monkeypatch.setattr(ivf, "ADD_BLOCK", 1000)  # several blocks at test size
    vectors = clustered(4500, seed=9)
    folder = tmp_path / "build"
    folder.mkdir()
    np.save(folder / ivf.VECTORS_FILE, vectors)
    mapped = np.load(folder / ivf.VECTORS_FILE, mmap_mode="r")
    reported: list[tuple[int, int]] = []
    built = IvfIndex.build(mapped, progress=lambda done, total: reported.append((done, total)))
    assert reported == [(0, 4500), (1000, 4500), (2000, 4500), (3000, 4500), (4000, 4500), (4500, 4500)]
    in_memory = IvfIndex.build(vectors)  # the same codes, lists and calibration as one add of every row
    assert (built.lists, built.nprobe) == (in_memory.lists, in_memory.nprobe)
    queries = clustered(30, seed=10)
    np.testing.assert_array_equal(built.search_codes_batch(queries, 10)[1], in_memory.search_codes_batch(queries, 10)[1])
    assert built._reader is not None  # re-ranking reads its rows from the file, as a loaded index does

    written_before = (folder / ivf.VECTORS_FILE).stat()
    assert sorted(built.save(folder)) == sorted(dense.files_for("ivf"))
    after = (folder / ivf.VECTORS_FILE).stat()
    assert (after.st_ino, after.st_mtime_ns) == (written_before.st_ino, written_before.st_mtime_ns)  # not rewritten
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    built.save(elsewhere)  # rows mapped from another file: copied block by block
    np.testing.assert_array_equal(np.load(elsewhere / ivf.VECTORS_FILE), vectors)
    for saved in (folder, elsewhere):
        loaded = dense.load(saved, "ivf")
        for query in queries[:10]:
            np.testing.assert_array_equal(loaded.search(query, 10)[1], in_memory.search(query, 10)[1])


def test_a_slice_of_a_mapped_file_is_not_taken_for_the_file(tmp_path: Path) -> None:
    from incidentlib.search.ivf import VECTORS_FILE, _whole_file

    np.save(tmp_path / VECTORS_FILE, clustered(900, seed=11))
    mapped = np.load(tmp_path / VECTORS_FILE, mmap_mode="r")
    assert _whole_file(mapped) == tmp_path / VECTORS_FILE and _whole_file(mapped[:]) == tmp_path / VECTORS_FILE
    assert _whole_file(mapped[1:]) is None and _whole_file(mapped[:-1]) is None and _whole_file(np.array(mapped)) is None
    built = IvfIndex.build(mapped[100:])  # rows 100.. of the file, read like memory and saved as their own file
    target = tmp_path / "part"
    target.mkdir()
    built.save(target)
    np.testing.assert_array_equal(np.load(target / VECTORS_FILE), np.asarray(mapped[100:]))


def test_non_finite_mapped_rows_are_named_and_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import incidentlib.search.ivf as ivf

    monkeypatch.setattr(ivf, "ADD_BLOCK", 256)
    vectors = clustered(900, seed=12)
    np.save(tmp_path / "rows.npy", vectors)
    index = IvfIndex.build(np.load(tmp_path / "rows.npy", mmap_mode="r"))
    index._vectors = np.load(tmp_path / "rows.npy", mmap_mode="r+")
    index._vectors[700, 3] = np.nan
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(ValueError, match=r"NaN or infinite vectors \(in rows 512\.\.767\)"):
        index.save(target)
    assert not list(target.iterdir())


def test_a_library_builds_its_inverted_file_over_rows_assembled_on_disk(tmp_path: Path, data_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store writes the rows into the build's own vectors file and builds the index over it mapped: the file the
    index serves is the one assembled (one copy on disk, none in memory); a failed build leaves no staging folder."""
    import incidentlib.search.store as store

    root = small_library(tmp_path / "small", data_dir, IDS)
    config = SearchConfig(cache_dir=tmp_path / "cache", hnsw_threshold=10, ivf_threshold=20)
    seen: list[np.ndarray] = []
    real_build = IvfIndex.build.__func__  # type: ignore[attr-defined]

    building: list[tuple[int, int]] = []

    def spying_build(cls: type[IvfIndex], vectors: np.ndarray, progress: object = None) -> IvfIndex:
        seen.append(vectors)
        assert callable(progress)  # the caller's progress, to report the rows added

        def tagged(done: int, total: int) -> None:
            building.append((done, total))
            progress(done, total)

        return real_build(cls, vectors, tagged)

    monkeypatch.setattr(IvfIndex, "build", classmethod(spying_build))
    library = Library(load_library(root), config, embedder=HashEmbedder())
    reported: list[tuple[int, int]] = []
    report = library.build_index(lambda done, total: reported.append((done, total)))
    assert report.index_kind == "ivf" and len(seen) == 1
    # the embedding's progress, then the rows added to the inverted file (one block at this size), on one callback
    assert building == [(0, report.chunks), (report.chunks, report.chunks)] and reported[-2:] == building
    assert isinstance(seen[0], np.memmap) and Path(seen[0].filename).name == store.IVF_VECTORS_FILE
    folder = Path(report.path)
    meta = json.loads((folder / "meta.json").read_text())
    served = folder / meta["build"] / store.IVF_VECTORS_FILE
    assert Path(seen[0].filename).parent.name.startswith(".build-")  # assembled in the staging folder, renamed whole
    assert not [p for p in folder.iterdir() if p.name.startswith(".build-")]
    in_memory = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "flat"), embedder=HashEmbedder())
    in_memory.build_index()
    np.testing.assert_array_equal(np.load(served), in_memory._search_engine.chunk_vectors())
    assert [h.id for h in library.search("NCCL watchdog timeout", k=3, mode="dense").results] == \
        [h.id for h in in_memory.search("NCCL watchdog timeout", k=3, mode="dense").results]

    def failing_build(cls: type[IvfIndex], vectors: np.ndarray, progress: object = None) -> IvfIndex:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(IvfIndex, "build", classmethod(failing_build))
    # a build killed while it wrote left its staging folder: the next build removes it, and keeps a live process's
    orphan, live, recent = folder / ".build-999999999-x", folder / f".build-{os.getppid()}-y", folder / ".build-999999998-z"
    long_ago = time.time() - store.ORPHAN_AGE_S - 60
    for staging in (orphan, live, recent):
        staging.mkdir()
        (staging / store.IVF_VECTORS_FILE).write_bytes(b"rows of an unfinished build")
        if staging is not recent:
            for entry in (staging / store.IVF_VECTORS_FILE, staging):
                os.utime(entry, (long_ago, long_ago))
    exact = config.model_copy(update={"hnsw_threshold": 10**9, "ivf_threshold": 10**9})  # another kind: a new build
    assert Library(load_library(root), exact, embedder=HashEmbedder()).build_index().action == "refreshed"
    assert not orphan.exists() and live.exists() and recent.exists()  # a dead process's, untouched for a day: removed
    fresh_config = SearchConfig(cache_dir=tmp_path / "cache2", hnsw_threshold=10, ivf_threshold=20)
    with pytest.raises(RuntimeError, match="interrupted"):
        Library(load_library(root), fresh_config, embedder=HashEmbedder()).build_index()
    leftovers = list((tmp_path / "cache2").rglob(".build-*"))
    assert not leftovers


def test_every_run_of_rows_is_announced_before_any_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cold rows are read together: one WILLNEED hint per run of consecutive rows, all before the first read."""
    import incidentlib.search.ivf as ivf

    vectors = clustered(300, seed=13)
    np.save(tmp_path / "rows.npy", vectors)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    reader = ivf._RowReader(tmp_path / "rows.npy", int(mapped.offset), vectors.shape[1])
    events: list[tuple[str, int, int]] = []
    real_preadv = ivf.os.preadv

    def hint(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == ivf.os.POSIX_FADV_WILLNEED
        events.append(("hint", offset, length))

    def read(fd: int, buffers: list, offset: int) -> int:
        events.append(("read", offset, sum(len(b) for b in buffers)))
        return int(real_preadv(fd, buffers, offset))

    monkeypatch.setattr(ivf.os, "posix_fadvise", hint)
    monkeypatch.setattr(ivf.os, "preadv", read)
    asked = np.array([200, 5, 6, 7, 100])
    np.testing.assert_array_equal(reader.rows(asked), vectors[asked])
    row = vectors.shape[1] * 4
    runs = [(int(mapped.offset) + first * row, count * row) for first, count in ((5, 3), (100, 1), (200, 1))]
    assert events == [("hint", *run) for run in runs] + [("read", *run) for run in runs]
    events.clear()
    reader.rows(np.array([40, 41]))  # one run: nothing to overlap, no hint
    assert [kind for kind, _, _ in events] == ["read"]


def test_rows_added_into_a_file_are_served_from_it_and_never_written_over(tmp_path: Path) -> None:
    """``add(rows_file=...)``: the current rows copied, the new ones after, served from that file; saving into its folder
    after the folder was renamed (as a build is renamed into place) keeps the file, found by the open file, not by name."""
    vectors = clustered(3000, seed=14)
    (tmp_path / "old").mkdir()
    np.save(tmp_path / "old" / "vectors.npy", vectors[:2500])
    index = IvfIndex.build(np.load(tmp_path / "old" / "vectors.npy", mmap_mode="r"))
    in_memory = IvfIndex.build(vectors[:2500])
    in_memory.add(vectors[2500:])
    (tmp_path / "staging").mkdir()
    index.add(vectors[2500:], rows_file=tmp_path / "staging" / "vectors.npy")
    assert isinstance(index.vectors, np.memmap) and index._reader is not None
    np.testing.assert_array_equal(index.vectors, vectors)
    queries = clustered(20, seed=15)
    for query in queries:
        np.testing.assert_array_equal(index.search(query, 10)[1], in_memory.search(query, 10)[1])
    (tmp_path / "staging").rename(tmp_path / "build")
    written = (tmp_path / "build" / "vectors.npy").stat()
    index.save(tmp_path / "build")
    after = (tmp_path / "build" / "vectors.npy").stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (written.st_ino, written.st_size, written.st_mtime_ns)
    loaded = dense.load(tmp_path / "build", "ivf")
    np.testing.assert_array_equal(loaded.vectors, vectors)
    for query in queries:
        np.testing.assert_array_equal(loaded.search(query, 10)[1], in_memory.search(query, 10)[1])


def test_rows_are_read_where_the_system_has_no_read_hints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import incidentlib.search.ivf as ivf

    vectors = clustered(300, seed=16)
    np.save(tmp_path / "rows.npy", vectors)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    reader = ivf._RowReader(tmp_path / "rows.npy", int(mapped.offset), vectors.shape[1])
    monkeypatch.delattr(ivf.os, "posix_fadvise")  # as on macOS
    asked = np.array([250, 3, 4, 120])
    np.testing.assert_array_equal(reader.rows(asked), vectors[asked])


def a_mapped_index(tmp_path: Path) -> tuple[IvfIndex, IvfIndex]:
    """An index built in memory, and the same index saved and loaded (its lists mapped), lists of a few pages each."""
    built = IvfIndex.build(clustered(20_000, dim=128, seed=11))  # ~140 rows a list: a few pages of codes and ids
    folder = tmp_path / "ivf"
    folder.mkdir()
    built.save(folder)
    loaded = dense.load(folder, "ivf")
    assert isinstance(loaded, IvfIndex) and loaded.mapped
    return built, loaded


def test_a_mapped_index_scans_the_lists_it_found_and_answers_as_faiss_does(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the page cache holds: the lists a search will probe are found first, their spans (codes, then ids) are
    the ones FAISS maps, they are announced when the sample says cold, and the answer is FAISS's own search's."""
    import faiss

    from incidentlib import cold_pages

    built, loaded = a_mapped_index(tmp_path)
    index = loaded._index
    # search_preassigned shares a batch's queries among the threads only in this mode (FAISS's default scans on one)
    assert index.parallel_mode == built._index.parallel_mode == ivf.PARALLEL_OVER_QUERIES
    spans = loaded._spans()
    assert spans is not None and built._spans() is None  # an index in memory has nothing to announce
    lists = index.invlists
    for number in range(loaded.lists):
        size = lists.list_size(number)
        codes = faiss.rev_swig_ptr(lists.get_codes(number), size * lists.code_size).ctypes.data if size else 0
        ids_end = faiss.rev_swig_ptr(lists.get_ids(number), size).ctypes.data + size * ivf.ID_BYTES if size else 0
        assert (spans[0][number], spans[1][number]) == (codes, ids_end)
    advised: list[tuple[int, int]] = []
    monkeypatch.setattr(cold_pages, "_addresses_missing", lambda addresses: 1)  # every sampled page cold
    monkeypatch.setattr(cold_pages, "_MADVISE", lambda address, length, advice: advised.append((address.value, length.value)) or 0)
    queries = clustered(25, dim=128, seed=12)
    for nprobe in (1, 4, loaded.lists + 5):  # past the list count: every list, as FAISS clamps it
        advised.clear()
        scores, ids = loaded.search_codes_batch(queries, 10, nprobe=nprobe)
        want_scores, want_ids = index.search(queries, 10, params=faiss.SearchParametersIVF(nprobe=min(nprobe, loaded.lists)))
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(scores, want_scores)
        probed = np.unique(index.quantizer.search(queries, min(nprobe, loaded.lists))[1])
        assert advised == cold_pages.page_ranges(0, 1, spans[0][probed], spans[1][probed])
    # asked of the scan itself for more lists than there are (its callers clamp first): every list, as FAISS clamps it
    wide = loaded._scan(queries, 10, faiss.SearchParametersIVF(nprobe=loaded.lists + 5))
    np.testing.assert_array_equal(wide[1], index.search(queries, 10, params=faiss.SearchParametersIVF(nprobe=loaded.lists))[1])
    # more than there are rows: padded as FAISS pads
    _, deep = loaded.search_codes_batch(queries[:2], 30_000, nprobe=2)
    np.testing.assert_array_equal(deep, index.search(queries[:2], 20_000, params=faiss.SearchParametersIVF(nprobe=2))[1])
    # the single-query path, filtered through FAISS's selector too, answers as the index in memory does
    monkeypatch.setattr(ivf, "EXACT_FILTER_ROWS", 10)
    allowed = np.sort(np.random.default_rng(13).choice(20_000, 5_000, replace=False))
    for query in queries[:6]:
        np.testing.assert_array_equal(loaded.search(query, 10)[1], built.search(query, 10)[1])
        np.testing.assert_array_equal(loaded.search(query, 10, allowed=allowed)[1], built.search(query, 10, allowed=allowed)[1])
    # cached (by the page cache's answer): checked, nothing announced
    monkeypatch.setattr(cold_pages, "_addresses_missing", lambda addresses: 0)
    advised.clear()
    loaded.search_codes_batch(queries, 10, nprobe=4)
    assert advised == []


def test_lists_out_of_the_page_cache_are_found_cold_then_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's own answer: after the index file's pages are dropped its probed lists are cold and announced; once
    read, they are cached and not announced again."""
    from incidentlib import cold_pages

    if cold_pages._MINCORE is None or cold_pages._MADVISE is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore, madvise and posix_fadvise (Linux)")
    _, loaded = a_mapped_index(tmp_path)
    fd = os.open(tmp_path / "ivf" / "ivf.faiss", os.O_RDONLY)
    try:  # after loading, which read the file: a restarted server finds its lists out of the page cache
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    spans = loaded._spans()
    assert spans is not None
    if not cold_pages._addresses_missing(spans[0][spans[1] > spans[0]]):
        pytest.skip("this file system keeps dropped pages (tmpfs?): no cold list to test with")
    announced: list[bool] = []
    real = ivf.announce_cold_spans
    monkeypatch.setattr(ivf, "announce_cold_spans", lambda starts, ends: announced.append(real(starts, ends)) or announced[-1])
    queries = clustered(6, dim=128, seed=12)
    loaded.search_codes_batch(queries, 10, nprobe=4)
    loaded.search_codes_batch(queries, 10, nprobe=4)
    assert announced == [True, False]
