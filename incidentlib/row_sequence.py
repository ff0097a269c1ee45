"""Read-only sequences whose items are made when they are read, a row at a time.

Columns kept where they are stored (the start snapshot's chunk texts, its chunk table) hand out items made on
each read instead of holding them all; :class:`RowSequence` resolves negative indexes and slices for all of them,
so each only says how row ``i`` is made.  Three column shapes the start snapshot stores its chunk table in:

* :class:`LineColumn`: strings without a newline, UTF-8 and joined by ``\\n`` in a buffer (a mapped file);
* :class:`CodedColumn`: one byte a row, a number into a short list of shared strings;
* :class:`RunColumn`: ``names[i]`` repeated ``counts[i]`` times (each chunk's incident, from the chunk counts).

Each passes over all its rows at C speed (``__iter__``) and makes one row on its own in O(1).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import mmap
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, overload

if TYPE_CHECKING:
    import numpy as np

T_co = TypeVar("T_co", covariant=True)
#: Positions turned into Python ints at a time while :class:`GatheredRows` is iterated (a bounded transient list).
GATHER_BLOCK = 65_536
#: Rows of a :class:`LineColumn` decoded at a time while it is iterated: a few MB of strings, not the whole column.
ITER_BLOCK = 65_536


class RowSequence(Sequence[T_co]):
    """A sequence of ``len(self)`` items whose item ``row`` (``0 <= row < len(self)``) :meth:`_row` makes when read."""

    def _row(self, row: int) -> T_co:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T_co: ...
    @overload
    def __getitem__(self, index: slice) -> list[T_co]: ...
    def __getitem__(self, index: int | slice) -> T_co | list[T_co]:
        size = len(self)
        if isinstance(index, slice):
            return [self._row(row) for row in range(*index.indices(size))]
        if not -size <= index < size:
            raise IndexError(index)
        return self._row(index % size)


class LineColumn(RowSequence[str]):
    """``count`` strings, none holding a newline, stored UTF-8 and joined by ``\\n`` in the ``size`` bytes at
    ``start`` of ``buffer``: exactly ``"\\n".join(rows).encode()``, which is also what a rows digest hashes
    (:meth:`joined`), so a digest of the column needs no row made.

    Where the rows start is found once, with one vectorised scan for the newlines (8 bytes a row); a wrong number
    of newlines for ``count`` rows raises ValueError."""

    def __init__(self, buffer: bytes | mmap.mmap, start: int, size: int, count: int) -> None:
        import numpy as np

        if start < 0 or size < 0 or start + size > len(buffer):
            raise ValueError("the column lies outside its buffer")
        newlines = np.flatnonzero(np.frombuffer(buffer, dtype=np.uint8, count=size, offset=start) == ord("\n"))
        if (count == 0 and size != 0) or (count > 0 and len(newlines) != count - 1):
            raise ValueError(f"{len(newlines)} line breaks in a column of {count} rows")
        # row i is bytes [bounds[i] + 1, bounds[i + 1]) of the column
        self._bounds = np.concatenate(([-1], newlines, [size])).astype(np.int64) if count else np.empty(0, np.int64)
        self._buffer, self._start, self._size, self._count = buffer, start, size, count

    def __len__(self) -> int:
        return self._count

    def _row(self, row: int) -> str:
        low, high = int(self._bounds[row]) + 1, int(self._bounds[row + 1])
        return str(self._buffer[self._start + low:self._start + high], "utf-8")

    def joined(self) -> bytes:
        """The rows as stored: ``"\\n".join(self).encode()``."""
        return bytes(self._buffer[self._start:self._start + self._size])

    def joined_blocks(self, rows: int) -> Iterator[bytes]:
        """The rows as stored, ``rows`` at a time: each block is ``"\\n".join(block).encode()``."""
        for first in range(0, self._count, rows):
            low, high = int(self._bounds[first]) + 1, int(self._bounds[min(first + rows, self._count)])
            yield bytes(self._buffer[self._start + low:self._start + high])

    def __iter__(self) -> Iterator[str]:
        # a block of rows decoded and split at a time (C speed), not the whole column at once: at 13.5M rows that
        # made every string of the column together, over a gigabyte
        for block in self.joined_blocks(ITER_BLOCK):
            yield from str(block, "utf-8").split("\n")


def joined_lines(rows: Sequence[str]) -> bytes:
    """``"\\n".join(rows).encode()``; a :class:`LineColumn` holds exactly those bytes and hands them over without
    making a row (the start snapshot's chunk ids and digests: 1.35M each at 100k incidents)."""
    return rows.joined() if isinstance(rows, LineColumn) else "\n".join(rows).encode()


class CodedColumn(RowSequence[str]):
    """Row ``i`` is ``names[codes[i]]``: one byte a row, every row of a name the same string object.  A code out of
    range of ``names`` raises ValueError."""

    def __init__(self, names: Sequence[str], codes: bytes) -> None:
        if codes and max(codes) >= len(names):
            raise ValueError(f"a code is out of range of the {len(names)} names")
        self._names, self._codes = list(names), codes

    def __len__(self) -> int:
        return len(self._codes)

    def _row(self, row: int) -> str:
        return self._names[self._codes[row]]

    def __iter__(self) -> Iterator[str]:
        return map(self._names.__getitem__, self._codes)


class RunColumn(RowSequence[str]):
    """``names[0]`` ``counts[0]`` times, then ``names[1]`` ``counts[1]`` times, and so on (each chunk's incident,
    from the incidents in order and their chunk counts)."""

    def __init__(self, names: Sequence[str], counts: Sequence[int]) -> None:
        import numpy as np

        if len(names) != len(counts) or any(count < 0 for count in counts):
            raise ValueError("one non-negative count is needed per name")
        self.names = list(names)
        self._counts = list(counts)
        self._positions: np.ndarray = np.repeat(np.arange(len(self.names), dtype=np.int64), self._counts)

    def __len__(self) -> int:
        return len(self._positions)

    def _row(self, row: int) -> str:
        return self.names[int(self._positions[row])]

    def positions(self) -> np.ndarray:
        """Row ``i``'s name as its index into :attr:`names` (read-only int64 array)."""
        view = self._positions.view()
        view.flags.writeable = False
        return view

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(map(itertools.repeat, self.names, self._counts))


class SplicedRows(RowSequence[T_co]):
    """The rows of ``base`` with some runs left out and new rows put in, without copying the rows kept.

    ``pieces`` in order, each a ``range`` of rows of ``base`` (the ranges ascending and apart: the base's rows keep
    their order) or a list of new rows.  A write to a large live library changes a few incidents' chunks; each column
    of the chunk table after it is the previous one spliced so (:func:`incidentlib.search.chunks.patched_chunks`).
    Spliced rows of spliced rows are flattened onto the first base, so reading a row stays one binary search over
    the pieces however many writes came before, and the pieces grow with the changes, not with the rows."""

    def __init__(self, base: Sequence[T_co], pieces: Sequence[range | list[T_co]]) -> None:
        if isinstance(base, SplicedRows):
            pieces = [part for piece in pieces
                      for part in ([piece] if isinstance(piece, list) else base._pieces_between(piece.start, piece.stop))]
            base = base._base
        joined: list[range | list[T_co]] = []
        for piece in pieces:
            if not len(piece):
                continue
            last = joined[-1] if joined else None
            if isinstance(piece, range) and isinstance(last, range) and last.stop == piece.start:
                joined[-1] = range(last.start, piece.stop)
            elif isinstance(piece, range) and isinstance(last, range) and piece.start < last.stop:
                raise ValueError("the ranges of base rows must ascend without overlapping")
            else:
                joined.append(piece)
        self._base: Sequence[T_co] = base
        self._pieces = joined
        self._starts = list(itertools.accumulate((len(piece) for piece in joined), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def _row(self, row: int) -> T_co:
        index = bisect.bisect_right(self._starts, row) - 1
        piece, offset = self._pieces[index], row - self._starts[index]
        return self._base[piece.start + offset] if isinstance(piece, range) else piece[offset]

    def _pieces_between(self, low: int, high: int) -> list[range | list[T_co]]:
        """Rows ``low..high`` of this sequence as pieces over its base."""
        parts: list[range | list[T_co]] = []
        index = bisect.bisect_right(self._starts, low) - 1
        while low < high:
            start = self._starts[index]
            stop = min(high, self._starts[index + 1])
            parts.append(self._pieces[index][low - start:stop - start])
            low, index = stop, index + 1
        return parts

    def __iter__(self) -> Iterator[T_co]:
        base, at = iter(self._base), 0  # one pass over the base: its own iterator is the fast one
        for piece in self._pieces:
            if isinstance(piece, range):
                collections.deque(itertools.islice(base, piece.start - at), maxlen=0)
                yield from itertools.islice(base, len(piece))
                at = piece.stop
            else:
                yield from piece


class GatheredRows(RowSequence[T_co]):
    """Row ``i`` is ``base[positions[i]]``, or ``fill`` where ``positions[i]`` is -1: another order of (some of)
    ``base``'s rows, kept as one integer per row.

    An index whose rows are the library's chunks in another order (new chunks appended after an earlier build's, the
    rows of edited chunks left dead) names its rows so, instead of a list of 13.5M chunk ids at 1M incidents.  Equal
    to any sequence of the same items in the same order."""

    def __init__(self, base: Sequence[T_co], positions: np.ndarray, fill: T_co | None = None) -> None:
        lowest = -1 if fill is not None else 0
        if len(positions) and not (int(positions.min()) >= lowest and int(positions.max()) < len(base)):
            raise ValueError(f"positions outside the {len(base)} rows of the base")
        self._base = base
        self._positions = positions
        self._fill = fill

    def __len__(self) -> int:
        return len(self._positions)

    def _row(self, row: int) -> T_co:
        position = int(self._positions[row])
        return self._base[position] if position >= 0 else self._fill  # type: ignore[return-value]

    def __iter__(self) -> Iterator[T_co]:
        base, fill = self._base, self._fill
        for start in range(0, len(self._positions), GATHER_BLOCK):  # a block of Python ints at a time, not 13.5M
            positions = self._positions[start:start + GATHER_BLOCK].tolist()
            if fill is None:
                yield from map(base.__getitem__, positions)
            else:
                yield from (base[p] if p >= 0 else fill for p in positions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # a view of a mutable base, as a list
