"""Index rows named by numbers: each row's ``(chunk id, text digest)`` as two 64-bit words, matched in bulk.

The store decides which vectors of an earlier build it can keep by matching that build's rows to the chunks
asked for: same chunk id and same text digest.  Matched as Python tuples in sets and dicts, that took about
1.9 GB at 100k incidents (1.35M rows) and would take ten times as much at 1M, more than the machine has.  Here a
row is two ``uint64`` words: the digest itself (:attr:`Chunk.digest` is 16 hex digits, 64 bits of
``sha256(id, text)``) and XXH3-64 of the chunk id.  Two rows match when both words are equal; a false match needs
a 64-bit collision of the digests *and* of the id hashes of two different chunks at once (about ``n² / 2¹²⁸``),
far below any chance of a disk error.  Matching sorts one side's digests and looks the other side's up
(:func:`match`): 16 bytes a row and a few passes in C.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from ..row_sequence import LineColumn, joined_lines
from .chunks import Chunk, chunk_digests, chunk_ids

#: Rows per block when keys are made from columns: bounds the transient bytes objects (a few MB a block) whatever
#: the library's size.  Chosen by that argument, not tuned.
KEY_BLOCK = 65_536
#: A text digest: 16 hex digits (:attr:`incidentlib.search.chunks.Chunk.digest`), one line of a joined column.
DIGEST_DIGITS = 16


@dataclass(frozen=True)
class RowKeys:
    """``digests[i]`` and ``id_hashes[i]`` name row ``i``: its text digest as a number and XXH3-64 of its chunk id."""

    digests: np.ndarray
    id_hashes: np.ndarray

    def __len__(self) -> int:
        return len(self.digests)

    @classmethod
    def of(cls, ids: Sequence[str], digests: Sequence[str]) -> RowKeys | None:
        """The keys of rows given as two columns; None when a digest is not 16 hex digits (not a chunk's)."""
        if len(ids) != len(digests):
            raise ValueError(f"{len(ids)} chunk ids and {len(digests)} digests")
        words = digest_words(digests)
        return None if words is None else cls(words, id_hashes(ids))

    @classmethod
    def of_chunks(cls, chunks: Sequence[Chunk]) -> RowKeys:
        """The keys of ``chunks`` (from their id and digest columns); ValueError for a digest that is not a chunk's."""
        found = cls.of(chunk_ids(chunks), chunk_digests(chunks))
        if found is None:
            raise ValueError(f"a chunk's digest is not {DIGEST_DIGITS} hex digits")
        return found

    @classmethod
    def concatenate(cls, parts: Iterable[RowKeys]) -> RowKeys:
        pieces = list(parts)
        if not pieces:
            return cls(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))
        return cls(np.concatenate([p.digests for p in pieces]), np.concatenate([p.id_hashes for p in pieces]))

    def take(self, rows: np.ndarray) -> RowKeys:
        return RowKeys(self.digests[rows], self.id_hashes[rows])


def digest_words(digests: Sequence[str]) -> np.ndarray | None:
    """Each 16-hex-digit digest as a ``uint64`` (its big-endian value); None when any row is not one.

    The joined column, with a final line break, must be ``17 n`` bytes with a line break at every 17th: each row is
    then 16 ASCII bytes, which ``bytes.fromhex`` reads as 8 or refuses."""
    count = len(digests)
    if count == 0:
        return np.zeros(0, dtype=np.uint64)
    joined = joined_lines(digests) + b"\n"
    width = DIGEST_DIGITS + 1
    if len(joined) != width * count:
        return None
    table = np.frombuffer(joined, dtype=np.uint8).reshape(count, width)
    if not bool((table[:, DIGEST_DIGITS] == ord("\n")).all()):
        return None
    try:
        raw = bytes.fromhex(table[:, :DIGEST_DIGITS].tobytes().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if len(raw) != 8 * count:  # ``fromhex`` skips whitespace: a row with spaces is not 16 digits
        return None
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def id_hashes(ids: Sequence[str]) -> np.ndarray:
    """XXH3-64 of each chunk id's UTF-8 bytes, made a block of rows at a time from one pass over ``ids`` (a column's
    own iterator: slicing a spliced column finds each row by binary search, 2.8 s at 1.35M rows)."""
    parts = [np.zeros(0, dtype=np.uint64)]
    if isinstance(ids, LineColumn):  # hashed from the stored bytes: no string made
        for stored in ids.joined_blocks(KEY_BLOCK):
            encoded = stored.split(b"\n")
            parts.append(np.fromiter(map(xxhash.xxh3_64_intdigest, encoded), dtype=np.uint64, count=len(encoded)))
        return np.concatenate(parts)
    rows = iter(ids)
    while block := list(itertools.islice(rows, KEY_BLOCK)):
        encoded = "\n".join(block).encode().split(b"\n")  # one encode for the block, not one per row
        if len(encoded) != len(block):  # an id holding a line break (no chunk's does): one at a time
            encoded = [row.encode() for row in block]
        parts.append(np.fromiter(map(xxhash.xxh3_64_intdigest, encoded), dtype=np.uint64, count=len(encoded)))
    return np.concatenate(parts)


def match(old: RowKeys, new: RowKeys) -> np.ndarray:
    """For each row of ``new``, the row of ``old`` with the same key (the last one, when ``old`` holds it twice), or -1.

    ``old``'s digests are sorted once (stable, so equal digests keep their order and the last comes last); each new
    digest is looked up by binary search, and the id hash of the row found must agree."""
    found = np.full(len(new), -1, dtype=np.int64)
    if len(old) == 0 or len(new) == 0:
        return found
    order = np.argsort(old.digests, kind="stable")
    at = np.searchsorted(old.digests[order], new.digests, side="right") - 1
    candidate = order[np.maximum(at, 0)]
    agree = (at >= 0) & (old.digests[candidate] == new.digests) & (old.id_hashes[candidate] == new.id_hashes)
    found[agree] = candidate[agree]
    return found
