"""Read-only sequences whose items are made when they are read, a row at a time.

Columns kept where they are stored (the start snapshot's chunk texts, its chunk table) hand out items made on
each read instead of holding them all; :class:`RowSequence` resolves negative indexes and slices for all of them,
so each only says how row ``i`` is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, overload

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
