"""The column shapes of incidentlib.row_sequence (the start snapshot's chunk table): each reads as the list it stores,
row by row and whole, from bytes or a mapped file, and refuses a shape that does not fit."""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from incidentlib.row_sequence import CodedColumn, LineColumn, RunColumn, SplicedRows
from incidentlib.search.store import rows_digest

ROWS = ["IL-0025/title/en/0", "장애/본문#1", "", "x", "IL-9999/signal/raw/3 ünïcode"]


def _line_column(rows: list[str], prefix: bytes = b"head", suffix: bytes = b"tail") -> tuple[bytes, LineColumn]:
    joined = "\n".join(rows).encode()
    buffer = prefix + joined + suffix
    return buffer, LineColumn(buffer, len(prefix), len(joined), len(rows))


@pytest.mark.parametrize("rows", [ROWS, ["only"], [""], ["", ""], []])
def test_a_line_column_reads_as_its_rows(rows: list[str]) -> None:
    _, column = _line_column(rows)
    assert len(column) == len(rows) and list(column) == rows and column[:] == rows
    assert [column[i] for i in range(len(rows))] == rows and [column[-i] for i in range(1, len(rows) + 1)] == rows[::-1]
    assert column.joined() == "\n".join(rows).encode()
    if rows:
        with pytest.raises(IndexError):
            column[len(rows)]


def test_a_line_column_over_a_mapped_file(tmp_path: Path) -> None:
    path = tmp_path / "columns"
    path.write_bytes(b"..." + "\n".join(ROWS).encode())
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    column = LineColumn(mapped, 3, len(mapped) - 3, len(ROWS))
    assert list(column) == ROWS and column[4] == ROWS[4]


def test_a_line_column_refuses_a_wrong_shape() -> None:
    buffer, _ = _line_column(ROWS)
    size = len("\n".join(ROWS).encode())
    with pytest.raises(ValueError, match="4 line breaks in a column of 3 rows"):
        LineColumn(buffer, 4, size, 3)
    with pytest.raises(ValueError, match="0 line breaks in a column of 0 rows"):
        LineColumn(b"abc", 0, 3, 0)
    with pytest.raises(ValueError, match="outside its buffer"):
        LineColumn(buffer, 4, len(buffer), len(ROWS))


def test_the_rows_digest_of_line_columns_is_the_digest_of_their_rows() -> None:
    ids = [f"IL-{n:04d}/body/en/{n % 3}" for n in range(50)]
    digests = [f"{n:016x}" for n in range(50)]
    _, id_column = _line_column(ids)
    _, digest_column = _line_column(digests, prefix=b"", suffix=b"")
    assert rows_digest(id_column, digest_column) == rows_digest(ids, digests)
    assert rows_digest(id_column, digest_column) != rows_digest(ids[::-1], digests)


def test_a_coded_column_shares_its_names() -> None:
    names = ["body", "title"]
    column = CodedColumn(names, bytes([1, 0, 0, 1, 1]))
    assert list(column) == ["title", "body", "body", "title", "title"] and column[-1] == "title" and column[1:3] == ["body"] * 2
    assert all(value is names[0] for value in column if value == "body")
    assert list(CodedColumn([], b"")) == []
    with pytest.raises(ValueError, match="out of range of the 2 names"):
        CodedColumn(names, bytes([0, 2]))


def test_a_run_column_repeats_each_name_its_count() -> None:
    column = RunColumn(["IL-0001", "IL-0002", "IL-0003"], [2, 0, 3])
    expected = ["IL-0001", "IL-0001", "IL-0003", "IL-0003", "IL-0003"]
    assert list(column) == expected and column[:] == expected and column[2] == "IL-0003" and len(column) == 5
    assert column.positions().tolist() == [0, 0, 2, 2, 2]
    with pytest.raises(ValueError, match="read-only"):
        column.positions()[0] = 1  # read-only: the engine keeps it as its chunk-to-incident map
    assert np.array_equal(RunColumn([], []).positions(), np.empty(0))
    with pytest.raises(ValueError, match="one non-negative count"):
        RunColumn(["a"], [1, 2])
    with pytest.raises(ValueError, match="one non-negative count"):
        RunColumn(["a"], [-1])


def _splice(rows: list[str], rng: np.random.Generator, tag: str) -> tuple[list[range | list[str]], list[str]]:
    """Random pieces over ``rows`` (runs kept in order, runs dropped, new rows put in) and the list they stand for."""
    pieces: list[range | list[str]] = []
    expected: list[str] = []
    at = 0
    while at < len(rows):
        step = int(rng.integers(1, 6))
        choice = rng.integers(3)
        if choice == 0:  # kept
            pieces.append(range(at, min(at + step, len(rows))))
            expected.extend(rows[at:at + step])
        elif choice == 1:  # new rows put in before the next run
            new = [f"{tag}-{at}-{n}" for n in range(step)]
            pieces.append(new)
            expected.extend(new)
            continue
        at += step  # a kept run, or one dropped
    return pieces, expected


def test_spliced_rows_read_as_their_list_and_splices_of_splices_are_flattened() -> None:
    rng = np.random.default_rng(3)
    _, base = _line_column([f"row {n}" for n in range(200)])
    column: Sequence[str] = base
    current = list(base)
    for write in range(30):  # thirty changes, each over the previous result
        pieces, current = _splice(current, rng, f"w{write}")
        column = SplicedRows(column, pieces)
        assert len(column) == len(current) and list(column) == current
        assert [column[i] for i in range(len(current))] == current and column[-1:] == current[-1:]
    assert isinstance(column, SplicedRows) and column._base is base  # one level, over the first base
    pieces = column._pieces  # adjacent runs of base rows are joined: the pieces grow with the changes only
    assert not any(isinstance(a, range) and isinstance(b, range) and a.stop == b.start for a, b in itertools.pairwise(pieces))
    with pytest.raises(ValueError, match="ascend"):
        SplicedRows(base, [range(5, 9), range(3, 4)])
    assert list(SplicedRows(base, [])) == [] and len(SplicedRows(base, [[], range(2, 2)])) == 0


def test_a_line_column_iterates_and_joins_a_block_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib import row_sequence

    monkeypatch.setattr(row_sequence, "ITER_BLOCK", 2)
    for rows in (ROWS, [""], ["", ""], ["a", "", "b"], []):
        _, column = _line_column(rows)
        assert list(column) == rows
        assert b"\n".join(column.joined_blocks(2)) == "\n".join(rows).encode()
        assert [len(block.split(b"\n")) for block in column.joined_blocks(2)] == \
            [min(2, len(rows) - start) for start in range(0, len(rows), 2)]
