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

import itertools
import mmap
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, overload

if TYPE_CHECKING:
    import numpy as np

T_co = TypeVar("T_co", covariant=True)


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

    def __iter__(self) -> Iterator[str]:
        return iter(str(self.joined(), "utf-8").split("\n") if self._count else [])


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
