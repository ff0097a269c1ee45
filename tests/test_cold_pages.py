"""Cold rows of a mapped matrix are found by the kernel's page-cache residency and announced; cached rows are not."""

from __future__ import annotations

import itertools
import mmap
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse  # type: ignore[import-untyped]

from incidentlib import checksum, cold_pages, mapped_arrays
from incidentlib.search.lexical_top import WeightedQuery

ROWS, TERMS, PER_ROW = 6000, 500, 300  # a row of float64 weights spans a page or two


def a_matrix() -> sparse.csr_matrix:
    rng = np.random.default_rng(3)
    indices = np.sort(np.stack([rng.choice(TERMS, PER_ROW, replace=False) for _ in range(ROWS)]), axis=1)
    return sparse.csr_matrix((rng.random(ROWS * PER_ROW), indices.ravel().astype(np.int32),
                              np.arange(0, ROWS * PER_ROW + 1, PER_ROW)), shape=(ROWS, TERMS))


def save_and_drop(rows: sparse.csr_matrix, folder: Path) -> None:
    """Write the by-row arrays and drop them from the page cache (written back first, nothing maps them yet)."""
    for name in ("indices", "data"):
        path = folder / f"{name}.npy"
        np.save(path, getattr(rows, name))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def mapped(rows: sparse.csr_matrix, folder: Path) -> sparse.csr_matrix:
    data, indices = (mapped_arrays.map_verified_npy(folder / f"{name}.npy", checksum.checksum_file(folder / f"{name}.npy"),
                                                    random_access=True) for name in ("data", "indices"))
    matrix = sparse.csr_matrix((data, indices, rows.indptr), shape=rows.shape)
    assert mapped_arrays._mapping_of(matrix.data) is not None and mapped_arrays._mapping_of(matrix.indices) is not None
    return matrix


@pytest.fixture
def cold(tmp_path: Path) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """The matrix in memory, and the same matrix mapped from files none of whose pages are cached."""
    if cold_pages._MINCORE is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore and posix_fadvise (Linux)")
    rows = a_matrix()
    save_and_drop(rows, tmp_path)
    # map_verified_npy reads each file once for its checksum: drop what that read cached, as a restart would find it
    matrix = mapped(rows, tmp_path)
    for name in ("indices", "data"):
        fd = os.open(tmp_path / f"{name}.npy", os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    everything = np.arange(ROWS)
    if not cold_pages.pages_missing(matrix.data, matrix.indptr[everything]):  # 0, or None: refused
        pytest.skip("this file system keeps dropped pages (tmpfs?): no cold page to test with")
    return rows, matrix


def test_cold_rows_are_found_and_announced_then_cached_rows_are_not(cold, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rows, matrix = cold
    announced: list[int] = []
    real = cold_pages.will_need
    monkeypatch.setattr(cold_pages, "will_need", lambda array, starts, ends: announced.append(real(array, starts, ends)))
    positions = np.sort(np.random.default_rng(4).choice(ROWS, 400, replace=False))
    assert cold_pages.rows_cold(matrix, positions)
    query = WeightedQuery({3: 0.5, 77: 0.25, 499: 1.0}, TERMS)
    # the announced rows score as the matrix in memory does
    np.testing.assert_array_equal(query.score_rows(matrix, positions), query.score_rows(rows, positions))
    assert len(announced) == 2 and all(count > 0 for count in announced)  # both arrays, their pages in ranges
    assert cold_pages.pages_missing(matrix.data, matrix.indptr[positions]) == 0  # read in, by the announcing or the read
    assert not cold_pages.rows_cold(matrix, positions)
    announced.clear()
    np.testing.assert_array_equal(query.score_rows(matrix, positions), query.score_rows(rows, positions))
    assert announced == []  # cached: nothing announced, nothing paid for it
    assert not cold_pages.announce_cold_rows(matrix, positions)


def test_a_few_rows_are_read_without_asking(cold, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, matrix = cold
    asked: list[object] = []
    monkeypatch.setattr(cold_pages, "rows_cold", lambda *args: asked.append(args) or True)
    assert not cold_pages.announce_cold_rows(matrix, np.arange(cold_pages.RESIDENCY_SAMPLE - 1))
    assert asked == []
    assert cold_pages.announce_cold_rows(matrix, np.arange(cold_pages.RESIDENCY_SAMPLE))
    assert len(asked) == 1


def test_cold_rows_among_cached_ones_are_seen_by_the_sample(cold) -> None:  # type: ignore[no-untyped-def]
    """Rows cached by an earlier request, and a request that reads some of those and some cold ones: the sample
    reaches the cold ones and the request announces."""
    _, matrix = cold
    cached = np.arange(0, ROWS // 2)
    query = WeightedQuery({3: 1.0}, TERMS)
    query.score_rows(matrix, cached)
    assert not cold_pages.rows_cold(matrix, cached)
    mixed = np.r_[cached[:200], np.arange(ROWS // 2 + 100, ROWS, 100)]  # 200 cached rows, 29 cold ones
    assert cold_pages.rows_cold(matrix, mixed)
    assert cold_pages.announce_cold_rows(matrix, mixed)


def test_a_matrix_in_memory_is_never_announced(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rows = a_matrix()
    calls: list[object] = []
    monkeypatch.setattr(cold_pages, "will_need", lambda *args: calls.append(args))
    assert cold_pages.pages_missing(rows.data, np.array([0, 5])) is None
    assert not cold_pages.rows_cold(rows, np.arange(50))
    assert not cold_pages.announce_cold_rows(rows, np.arange(50))
    assert not cold_pages.announce_cold_rows(rows, np.array([], dtype=np.int64))
    assert calls == []


@pytest.mark.parametrize("seed", range(5))
def test_page_ranges_cover_exactly_the_pages_of_the_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    page, itemsize, offset = 4096, 8, int(rng.integers(0, 5000))
    starts = rng.integers(0, 20_000, size=60)
    ends = starts + rng.integers(0, 700, size=60)  # some empty, some spanning pages, some overlapping
    ranges = cold_pages.page_ranges(offset, itemsize, starts, ends, page)
    covered = set()
    for start, length in ranges:
        assert start % page == 0 and length % page == 0 and length > 0
        covered.update(range(start // page, (start + length) // page))
    wanted = {p for s, e in zip(starts, ends, strict=True) if e > s
              for p in range((offset + s * itemsize) // page, (offset + e * itemsize - 1) // page + 1)}
    assert covered == wanted
    assert all(a[0] + a[1] < b[0] for a, b in itertools.pairwise(ranges))  # ascending, merged when touching
    assert cold_pages.page_ranges(0, 8, np.array([5]), np.array([5])) == []


def test_residency_is_hidden_from_a_reader_that_neither_owns_nor_may_write_the_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "data.npy"
    path.write_bytes(b"\0" * 16)
    assert cold_pages.residency_visible(path)
    stranger = path.stat().st_uid + 1
    monkeypatch.setattr(os, "geteuid", lambda: stranger)
    assert cold_pages.residency_visible(path) == os.access(path, os.W_OK)  # a reader that may write still sees
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    assert not cold_pages.residency_visible(path)
    assert cold_pages.residency_visible(tmp_path / "missing.npy")  # nothing to hide


def test_cold_columns_are_announced_whole_and_cached_ones_are_not(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The by-term copy: a query's columns, each read whole, are asked for at once when one is cold."""
    if cold_pages._MINCORE is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore and posix_fadvise (Linux)")
    columns_in_memory = sparse.csc_matrix(a_matrix())
    for name in ("indices", "data"):
        np.save(tmp_path / f"{name}.npy", getattr(columns_in_memory, name))
    data, indices = (mapped_arrays.map_verified_npy(tmp_path / f"{name}.npy", checksum.checksum_file(tmp_path / f"{name}.npy"))
                     for name in ("data", "indices"))
    columns = sparse.csc_matrix((data, indices, columns_in_memory.indptr), shape=columns_in_memory.shape)
    assert mapped_arrays._mapping_of(columns.data) is not None
    for name in ("indices", "data"):
        fd = os.open(tmp_path / f"{name}.npy", os.O_RDONLY)
        try:
            os.fsync(fd)  # written back first: dirty pages are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not cold_pages.pages_missing(columns.data, columns.indptr[:-1]):
        pytest.skip("this file system keeps dropped pages (tmpfs?): no cold page to test with")
    announced: list[int] = []
    ranges: list[tuple[list[int], list[int]]] = []
    real = cold_pages.will_need

    def recorded(array: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> int:
        ranges.append((np.asarray(starts).tolist(), np.asarray(ends).tolist()))
        announced.append(real(array, starts, ends))
        return announced[-1]
    monkeypatch.setattr(cold_pages, "will_need", recorded)
    query = WeightedQuery({3: 0.5, 77: 0.25, 499: 1.0}, TERMS)
    np.testing.assert_array_equal(query.score_columns(columns), query.score_columns(columns_in_memory))
    assert len(announced) == 2 and all(count > 0 for count in announced)
    # announced whole: each column from its first entry to its last, in both arrays
    picked = np.array([3, 77, 499])
    whole = (columns.indptr[picked].tolist(), columns.indptr[picked + 1].tolist())
    assert ranges == [whole, whole]
    # more columns than the sample: all of them announced, the sample only decides whether
    ranges.clear()
    many = np.arange(100, 100 + 3 * cold_pages.RESIDENCY_SAMPLE)
    assert cold_pages.announce_cold_columns(columns, many)
    assert ranges[0] == (columns.indptr[many].tolist(), columns.indptr[many + 1].tolist())
    announced.clear()
    np.testing.assert_array_equal(query.score_columns(columns), query.score_columns(columns_in_memory))
    assert announced == []  # cached: nothing announced
    assert not cold_pages.announce_cold_columns(columns, np.array([], dtype=np.int64))


def test_cold_postings_are_announced_before_a_search_scores_them(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The BM25 index's postings of the query's terms, mapped and cold, are asked for at once; cached, they are not."""
    import dataclasses

    from incidentlib.search import lexical

    if cold_pages._MINCORE is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore and posix_fadvise (Linux)")
    texts = [f"node {i % 7} gpu xid {i % 13} nccl timeout rank {i}" for i in range(40_000)]
    built = lexical.build_postings(texts)
    for name in ("indices", "data"):
        np.save(tmp_path / f"{name}.npy", getattr(built, name))
        fd = os.open(tmp_path / f"{name}.npy", os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    indices, data = (np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("indices", "data"))
    mapped_index = lexical.LexicalIndex(postings=dataclasses.replace(built, indices=np.asarray(indices), data=np.asarray(data)))
    in_memory = lexical.LexicalIndex(postings=built)
    if not cold_pages.pages_missing(mapped_index.postings.indices, np.array([len(indices) // 2])):  # past the header
        pytest.skip("this file system keeps dropped pages (tmpfs?): no cold page to test with")
    announced: list[bool] = []
    asked: list[list[int]] = []
    real = lexical.announce_cold_slices

    def recorded(indptr: np.ndarray, arrays: tuple[np.ndarray, ...], picked: np.ndarray) -> bool:
        asked.append(np.asarray(picked).tolist())
        announced.append(real(indptr, arrays, picked))
        return announced[-1]
    monkeypatch.setattr(lexical, "announce_cold_slices", recorded)
    expected = in_memory.scores("nccl timeout gpu")
    assert announced == [False]  # arrays in memory are never announced
    np.testing.assert_array_equal(mapped_index.scores("nccl timeout gpu"), expected)
    assert announced == [False, True]
    np.testing.assert_array_equal(mapped_index.scores("nccl timeout gpu"), expected)
    assert announced == [False, True, False]  # cached now: nothing announced
    terms = sorted(mapped_index._term[token] for token in ("nccl", "timeout", "gpu"))
    assert asked[1] == terms  # the query's own terms' postings, each once


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # written back first: dirty pages are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_cold_spans_of_a_mapping_are_announced_by_address_and_cached_ones_are_not(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Memory a library mapped (FAISS's lists) is announced by address: exactly the pages of the spans, when cold."""
    if cold_pages._MINCORE is None or cold_pages._MADVISE is None or not hasattr(os, "posix_fadvise"):
        pytest.skip("needs mincore, madvise and posix_fadvise (Linux)")
    path = tmp_path / "lists.bin"
    page = mmap.PAGESIZE
    path.write_bytes(np.random.default_rng(5).bytes(64 * page))
    drop(path)
    mapping = np.memmap(path, dtype=np.uint8, mode="r")
    base = mapping.ctypes.data
    # three spans: one inside a page, one across pages, one touching the second (merged with it)
    starts = base + np.array([100, 5 * page + 10, 9 * page], dtype=np.int64)
    ends = base + np.array([900, 9 * page, 11 * page + 1], dtype=np.int64)
    if not cold_pages._addresses_missing(starts):
        pytest.skip("this file system keeps dropped pages (tmpfs?): no cold page to test with")
    calls: list[tuple[int, int, int]] = []
    real = cold_pages._MADVISE

    def recorded(address, length, advice):  # type: ignore[no-untyped-def]
        calls.append((int(address.value), int(length.value), advice))
        return real(address, length, advice)
    monkeypatch.setattr(cold_pages, "_MADVISE", recorded)
    assert cold_pages.announce_cold_spans(starts, ends)
    assert calls == [(base, page, mmap.MADV_WILLNEED), (base + 5 * page, 7 * page, mmap.MADV_WILLNEED)]
    mapping[: 12 * page].sum()  # read: now cached
    calls.clear()
    assert not cold_pages.announce_cold_spans(starts, ends) and calls == []
    assert not cold_pages.announce_cold_spans(starts[:0], ends[:0])
