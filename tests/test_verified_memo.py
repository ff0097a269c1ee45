"""Verified memos (incidentlib.verified_memo): a cache file verified once is not hashed again while its ``stat``
signature is the same, and any change of the file, of the expected checksum or of the checks means verifying
again, so a damaged file is still refused."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library

from incidentlib import checksum, file_memo, mapped_arrays, start_snapshot, verified_memo
from incidentlib.library import Library
from incidentlib.mapped_arrays import MappedArraysError, map_verified_npy
from incidentlib.search import lexical_store
from incidentlib.search.engine import SearchConfig
from incidentlib.search.lexical_store import LEXICAL_DIR, cached_lexical_index

IDS = ["IL-0021", "IL-0025", "IL-0126"]
#: A modification time long before now: a file set to it, then written, shows another signature at any clock tick.
PAST_NS = 1_000_000_000_000_000_000


@pytest.fixture
def no_racy_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memos may be written for files just made (the guard against two writes within one clock tick is tested
    on its own below)."""
    monkeypatch.setattr(file_memo, "RACY_SECONDS", 0.0)


def _aged(path: Path) -> None:
    os.utime(path, ns=(PAST_NS, PAST_NS))


def _verify(path: Path, expected: str, checks: str = "") -> bool:
    before = verified_memo.current_signature(path)
    assert before is not None
    if checksum.checksum_file(path) != expected:
        return False
    return verified_memo.remember(path, before, expected, checks)


def test_a_file_is_recalled_only_as_it_was_verified(tmp_path: Path, no_racy_wait: None) -> None:
    path = tmp_path / "vectors.bin"
    path.write_bytes(b"0123456789" * 100)
    _aged(path)
    expected = checksum.checksum_file(path)
    assert not verified_memo.recall(path, expected)  # nothing remembered yet
    assert _verify(path, expected, "ranges v1")
    assert verified_memo.memo_path(path).is_file()
    assert verified_memo.recall(path, expected, "ranges v1")
    assert not verified_memo.recall(path, expected, "ranges v2")  # other checks
    assert not verified_memo.recall(path, checksum.checksum_bytes(b"other"), "ranges v1")  # another expected value
    assert not verified_memo.recall(path, "", "ranges v1")
    # written in place, same size: the modification time moves
    with path.open("r+b") as handle:
        handle.write(b"X")
    assert not verified_memo.recall(path, expected, "ranges v1")


def test_a_file_replaced_by_a_rename_is_verified_again(tmp_path: Path, no_racy_wait: None) -> None:
    path, other = tmp_path / "a.bin", tmp_path / "b.bin"
    path.write_bytes(b"same bytes")
    other.write_bytes(b"same bytes")
    for file in (path, other):
        _aged(file)
    expected = checksum.checksum_file(path)
    assert _verify(path, expected)
    os.replace(other, path)  # same bytes, same times, another inode
    assert not verified_memo.recall(path, expected)


def test_no_memo_for_a_file_changed_within_the_racy_window(tmp_path: Path) -> None:
    path = tmp_path / "fresh.bin"
    path.write_bytes(b"just written")
    before = verified_memo.current_signature(path)
    assert before is not None
    assert not verified_memo.remember(path, before, checksum.checksum_file(path))  # ctime is now
    assert not verified_memo.memo_path(path).exists()


def test_no_memo_when_the_file_changed_after_its_signature(tmp_path: Path, no_racy_wait: None) -> None:
    path = tmp_path / "moving.bin"
    path.write_bytes(b"first")
    _aged(path)
    before = verified_memo.current_signature(path)
    assert before is not None
    path.write_bytes(b"second, longer")
    assert not verified_memo.remember(path, before, checksum.checksum_bytes(b"first"))
    assert not verified_memo.memo_path(path).exists()


@pytest.mark.parametrize("memo", [b"{not json", b"[1, 2]", b'{"format": 0}'])
def test_a_damaged_or_foreign_memo_means_verifying(tmp_path: Path, no_racy_wait: None, memo: bytes,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "file.bin"
    path.write_bytes(b"bytes")
    _aged(path)
    expected = checksum.checksum_file(path)
    assert _verify(path, expected)
    verified_memo.memo_path(path).write_bytes(memo)
    with caplog.at_level(logging.WARNING, logger="incidentlib.verified_memo"):
        assert not verified_memo.recall(path, expected)
    assert ("cannot be read" in caplog.text) == (memo == b"{not json")


def test_file_matches_hashes_once_and_never_remembers_a_mismatch(tmp_path: Path, no_racy_wait: None) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"id": "IL-0001/0"}\n')
    _aged(path)
    calls: list[Path] = []

    def compute(file: Path, _: str) -> str:
        calls.append(file)
        return checksum.checksum_file(file)

    wrong = checksum.checksum_bytes(b"something else")
    assert not verified_memo.file_matches(path, wrong, compute)
    assert not verified_memo.memo_path(path).exists()
    assert not verified_memo.file_matches(path, None, compute) and len(calls) == 1  # nothing to compare: not read
    expected = checksum.checksum_file(path)
    assert verified_memo.file_matches(path, expected, compute)
    assert verified_memo.file_matches(path, expected, compute)
    assert len(calls) == 2  # the mismatch and the first match; the second match came from the memo
    assert not verified_memo.file_matches(path, wrong, compute)  # a memo vouches for its own value only
    assert len(calls) == 3


class _NoHashing:
    """Stands for ``xxhash`` where a test asserts that no byte is hashed."""

    def xxh3_128(self, *args: object) -> object:
        raise AssertionError("hashed although the memo vouches for the file")


def test_a_mapped_npy_file_is_checked_once_then_taken_from_its_memo(tmp_path: Path, no_racy_wait: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "indices.npy"
    values = np.arange(5000, dtype=np.int32)
    np.save(path, values)
    _aged(path)
    expected = checksum.checksum_file(path)
    seen: list[int] = []

    def in_range(part: np.ndarray) -> str | None:
        seen.append(len(part))
        return None if int(part.max()) < 5000 else "out of range"

    first = map_verified_npy(path, expected, in_range, block=1024, memo_checks="below 5000")
    assert sum(seen) == 5000 and np.array_equal(first, values)
    with monkeypatch.context() as patched:
        patched.setattr(mapped_arrays, "xxhash", _NoHashing())
        again = map_verified_npy(path, expected, in_range, block=1024, memo_checks="below 5000")
        assert np.array_equal(again, values) and sum(seen) == 5000  # neither hashed nor checked
        with pytest.raises(AssertionError, match="hashed although"):  # other checks: verified again
            map_verified_npy(path, expected, in_range, block=1024, memo_checks="below 4000")
        with pytest.raises(AssertionError, match="hashed although"):  # no memo asked for
            map_verified_npy(path, expected, in_range, block=1024)
    # damaged in place: the signature moved, so the file is read and refused
    with path.open("r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(np.int32(9999).tobytes())
    with pytest.raises(MappedArraysError, match="out of range"):
        map_verified_npy(path, expected, in_range, block=1024, memo_checks="below 5000")


def test_a_start_snapshot_is_hashed_once_and_refused_when_damaged_later(
        tmp_path: Path, data_dir: Path, no_racy_wait: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    root, cache = small_library(tmp_path / "lib", data_dir, IDS), tmp_path / "cache"
    first = Library.open(root, SearchConfig(cache_dir=cache))
    _ = first._search_engine.chunks
    assert first.save_start_snapshot()
    key = first.data.snapshot_key
    assert key is not None
    path = start_snapshot.snapshot_path(cache, key)
    _aged(path)
    assert start_snapshot.load(cache, key) is not None  # verified by hashing, then remembered
    memo = json.loads(verified_memo.memo_path(path).read_bytes())
    assert memo["signature"][0] == path.stat().st_size

    def no_hash(*args: object) -> str:
        raise AssertionError("hashed although the memo vouches for the snapshot")

    with monkeypatch.context() as patched:
        patched.setattr(checksum, "checksum_mapped", no_hash)
        loaded = start_snapshot.load(cache, key)
    assert loaded is not None and loaded.incidents == first.data.incidents
    blob = bytearray(path.read_bytes())
    blob[-50] ^= 0x20  # one bit in the chunk texts, written in place
    with path.open("r+b") as handle:
        handle.write(bytes(blob))
    with caplog.at_level(logging.WARNING, logger="incidentlib.start_snapshot"):
        assert start_snapshot.load(cache, key) is None
    assert "checksum mismatch" in caplog.text


def test_pruning_snapshots_counts_a_memo_touch_as_a_use_and_removes_the_memo_with_its_snapshot(tmp_path: Path) -> None:
    folder = tmp_path / "start"
    folder.mkdir()
    snaps = [folder / f"{n}.snap" for n in range(start_snapshot.MAX_SNAPSHOTS + 1)]
    now = time.time()
    for age, snap in enumerate(snaps):  # snaps[0] is the newest by its own time, the last one the oldest
        snap.write_bytes(b"x")
        verified_memo.memo_path(snap).write_bytes(b"{}")
        for file in (snap, verified_memo.memo_path(snap)):
            os.utime(file, (now - 100 * (age + 1),) * 2)
    verified_memo.touch(snaps[-1])  # the oldest snapshot was used just now (through its memo)
    assert snaps[-1].stat().st_mtime < now - 100  # its own time is left alone
    start_snapshot._prune(folder)
    gone = snaps[-2]  # the least recently used
    kept = sorted(p.name for p in folder.iterdir())
    assert kept == sorted(name for snap in snaps if snap != gone for name in (snap.name, verified_memo.memo_path(snap).name))


def test_a_lexical_index_is_hashed_once_and_a_later_damage_still_rebuilds_it(tmp_path: Path, no_racy_wait: None,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["NCCL watchdog timeout on rank 3", "InfiniBand 링크가 끊겼다", "", "timeout timeout nccl"]
    first, source = cached_lexical_index(texts, tmp_path)
    assert source == "built"
    folder = next((tmp_path / LEXICAL_DIR).iterdir())
    for array in folder.glob("*.npy"):
        _aged(array)
    assert cached_lexical_index(texts, tmp_path)[1] == "loaded"  # verified by hashing, then remembered
    assert sorted(p.name for p in folder.glob(f"*{verified_memo.SUFFIX}")) == \
        sorted(f"{name}.npy{verified_memo.SUFFIX}" for name in lexical_store.ARRAYS)
    with monkeypatch.context() as patched:
        patched.setattr(mapped_arrays, "xxhash", _NoHashing())
        loaded, source = cached_lexical_index(texts, tmp_path)
    assert source == "loaded" and np.array_equal(loaded.scores("nccl timeout"), first.scores("nccl timeout"))
    indices = folder / "indices.npy"
    with indices.open("r+b") as handle:  # a posting pointing past the chunks, written in place
        handle.seek(-4, os.SEEK_END)
        handle.write(np.int32(len(texts) + 7).tobytes())
    rebuilt, source = cached_lexical_index(texts, tmp_path)
    assert source == "built" and np.array_equal(rebuilt.scores("nccl timeout"), first.scores("nccl timeout"))
