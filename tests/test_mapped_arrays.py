"""Named arrays in one checksummed file, read back through a copy-on-write memory map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from incidentlib.mapped_arrays import ALIGNMENT, MAGIC, MappedArraysError, read_arrays, write_arrays


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "table": rng.integers(0, 256, size=(37, 11), dtype=np.uint8),
        "weights": rng.standard_normal((5, 3)).astype(np.float32),
        "pieces": np.array([b"ab", b"abc", "타임아웃".encode()], dtype="S12"),
        "empty": np.zeros((0, 4), dtype=np.int32),
        "scalar_like": np.array([1.5], dtype=np.float64),
    }


def test_arrays_and_meta_come_back_equal_and_aligned(tmp_path: Path) -> None:
    path = tmp_path / "state.arrays"
    written = _arrays()
    write_arrays(path, written, {"made_from": "test", "sizes": [1, 2]})
    arrays, meta = read_arrays(path)
    assert meta == {"made_from": "test", "sizes": [1, 2]}
    assert list(arrays) == list(written)
    for name, array in written.items():
        assert arrays[name].dtype == array.dtype and arrays[name].shape == array.shape
        np.testing.assert_array_equal(arrays[name], array)
    base = arrays["table"].__array_interface__["data"][0] - _offset_in_file(path, "table")
    for name in written:  # every array starts on an ALIGNMENT boundary of the file (and so of the map)
        assert (arrays[name].__array_interface__["data"][0] - base) % ALIGNMENT == 0


def _offset_in_file(path: Path, name: str) -> int:
    import json
    import struct

    raw = path.read_bytes()
    (length,) = struct.unpack_from("<Q", raw, 32)
    header = json.loads(raw[40:40 + length])
    start = -(-(40 + length) // ALIGNMENT) * ALIGNMENT
    return start + next(entry["offset"] for entry in header["arrays"] if entry["name"] == name)


def test_writing_to_an_array_changes_the_process_copy_only(tmp_path: Path) -> None:
    path = tmp_path / "state.arrays"
    write_arrays(path, _arrays(), {})
    before = path.read_bytes()
    arrays, _ = read_arrays(path)
    arrays["weights"][0, 0] = 1234.5
    assert arrays["weights"][0, 0] == np.float32(1234.5)
    assert path.read_bytes() == before
    again, _ = read_arrays(path)
    np.testing.assert_array_equal(again["weights"], _arrays()["weights"])


@pytest.mark.parametrize("where", ["header", "payload", "last byte"])
def test_a_flipped_byte_is_refused(tmp_path: Path, where: str) -> None:
    path = tmp_path / "state.arrays"
    write_arrays(path, _arrays(), {"k": "v"})
    raw = bytearray(path.read_bytes())
    position = {"header": 45, "payload": len(raw) // 2, "last byte": len(raw) - 1}[where]
    raw[position] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(MappedArraysError, match="checksum mismatch") as caught:
        read_arrays(path)
    assert str(path) in str(caught.value)


def test_truncated_foreign_and_empty_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.arrays"
    write_arrays(path, _arrays(), {})
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(MappedArraysError, match="checksum mismatch"):
        read_arrays(path)
    path.write_bytes(raw[:30])
    with pytest.raises(MappedArraysError, match="shorter than the arrays header"):
        read_arrays(path)
    path.write_bytes(b"PK\x03\x04" + raw[4:])
    with pytest.raises(MappedArraysError, match="not an incidentlib arrays file"):
        read_arrays(path)
    path.write_bytes(MAGIC + raw[16:32] + (10**9).to_bytes(8, "little") + raw[40:])
    with pytest.raises(MappedArraysError, match="truncated"):
        read_arrays(path)
    with pytest.raises(FileNotFoundError):
        read_arrays(tmp_path / "absent.arrays")


def test_object_arrays_are_refused_and_the_stored_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.arrays"
    write_arrays(path, _arrays(), {"version": 1})
    before = path.read_bytes()
    with pytest.raises(MappedArraysError, match="'names' holds Python objects"):
        write_arrays(path, {"names": np.array(["a", None], dtype=object)}, {"version": 2})
    assert path.read_bytes() == before
    assert [entry.name for entry in tmp_path.iterdir()] == ["state.arrays"]  # no temporary file left behind


@pytest.mark.parametrize("array", [
    np.arange(10, dtype=np.int32),
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.zeros(0, dtype=np.int64),
])
def test_a_saved_npy_file_is_mapped_after_one_checked_pass(tmp_path: Path, array: np.ndarray) -> None:
    from incidentlib.checksum import checksum_file
    from incidentlib.mapped_arrays import map_verified_npy

    path = tmp_path / "values.npy"
    np.save(path, array)
    seen: list[int] = []
    mapped = map_verified_npy(path, checksum_file(path), lambda part: seen.append(len(part)), block=4)  # type: ignore[func-returns-value]
    np.testing.assert_array_equal(mapped, array)
    assert mapped.shape == array.shape and not mapped.flags.writeable
    assert sum(seen) == array.size and all(size <= 4 for size in seen)
    with pytest.raises(MappedArraysError, match="does not match its checksum"):
        map_verified_npy(path, "xxh3_128:" + "0" * 32)
    if array.size:
        with pytest.raises(MappedArraysError, match=r"values\.npy: too big"):
            map_verified_npy(path, checksum_file(path), lambda part: "too big" if part.max() > 5 else None, block=4)
    (tmp_path / "foreign.npy").write_bytes(b"not numpy at all")
    with pytest.raises(MappedArraysError, match=r"not a readable \.npy file"):
        map_verified_npy(tmp_path / "foreign.npy", "")


@pytest.mark.parametrize("start", [0, 1, 4097])
def test_the_checksum_of_a_mapped_file_equals_that_of_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 start: int) -> None:
    """Hashed in blocks that end off page boundaries, each block's pages let go once hashed: the same value."""
    import mmap

    from incidentlib import checksum

    payload = np.random.default_rng(5).integers(0, 256, size=3 * mmap.PAGESIZE + 123, dtype=np.uint8).tobytes()
    path = tmp_path / "blob"
    path.write_bytes(payload)
    monkeypatch.setattr(checksum, "READ_BLOCK", 5000)
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    assert checksum.checksum_mapped(mapped, start) == checksum.checksum_bytes(payload[start:])
    assert mapped[:] == payload  # the pages let go read back the same
    mapped.close()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the kernel's mapping flags (Linux)")
def test_an_array_read_at_random_is_mapped_without_read_ahead(tmp_path: Path) -> None:
    from conftest import mapping_flags

    from incidentlib.checksum import checksum_file
    from incidentlib.mapped_arrays import map_verified_npy

    scattered, scanned = tmp_path / "rows.npy", tmp_path / "columns.npy"
    for path in (scattered, scanned):
        np.save(path, np.arange(50_000, dtype=np.int64))
    rows = map_verified_npy(scattered, checksum_file(scattered), random_access=True)
    columns = map_verified_npy(scanned, checksum_file(scanned))
    assert "rr" in mapping_flags(scattered.resolve())  # MADV_RANDOM: no read-ahead around a read
    assert mapping_flags(scanned.resolve()) and "rr" not in mapping_flags(scanned.resolve())
    np.testing.assert_array_equal(rows, np.arange(50_000))  # the advice changes what is read ahead, not the values
    np.testing.assert_array_equal(columns, rows)
