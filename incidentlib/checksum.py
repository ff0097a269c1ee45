"""Checksums of persisted cache files: XXH3-128, written with the algorithm's name (``xxh3_128:<32 hex>``).

A checksum here detects a damaged or truncated file (a crash, a full disk, a bit flip, a hand edit),
not a forger: whoever can replace a cache file can replace its ``meta.json`` too, so a cryptographic
hash buys nothing at load time while it costs the most time of a start over a large index (SHA-256
reads about 1.4 GB/s on the benchmark machine, XXH3 about 19 GB/s; ``docs/benchmarks.md``).  128 bits
make an accidental match of a damaged file out of reach.  Every value carries the algorithm's name,
so a file hashed another way never matches and is rebuilt, never trusted.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import xxhash

from .storage import release_pages

ALGORITHM = "xxh3_128"
#: Bytes read per call while hashing a file: large enough that the call overhead vanishes next to the
#: hashing, small enough to keep a few MB in memory whatever the file's size.  Chosen, not tuned.
READ_BLOCK = 1 << 22
#: Length of :func:`digest`'s raw value.
DIGEST_BYTES = 16


def checksum_bytes(data: bytes | memoryview) -> str:
    """``"xxh3_128:" + hex(XXH3-128(data))``."""
    return f"{ALGORITHM}:{xxhash.xxh3_128_hexdigest(data)}"


def checksum_file(path: Path) -> str:
    """:func:`checksum_bytes` of the file's bytes, read in blocks; raises ``OSError`` as reading does."""
    hasher = xxhash.xxh3_128()
    with path.open("rb") as handle:
        while block := handle.read(READ_BLOCK):
            hasher.update(block)
    return f"{ALGORITHM}:{hasher.hexdigest()}"


def digest(data: bytes | memoryview) -> bytes:
    """The raw XXH3-128 of ``data`` (:data:`DIGEST_BYTES` bytes), for binary headers."""
    return xxhash.xxh3_128_digest(data)


def checksum_mapped(mapped: mmap.mmap, start: int = 0) -> str:
    """:func:`checksum_bytes` of ``mapped[start:]``, a file mapped read-only, read a block at a time; each block's
    pages are let go from this process's mapping once hashed (``MADV_DONTNEED``: the page cache keeps them), so a
    pass over a file of gigabytes does not leave it all counted in the process's RSS."""
    view = memoryview(mapped)
    try:
        hasher = xxhash.xxh3_128()
        for block_start in range(start, len(mapped), READ_BLOCK):
            block_end = min(block_start + READ_BLOCK, len(mapped))
            hasher.update(view[block_start:block_end])
            release_pages(mapped, block_start, block_end)
        return f"{ALGORITHM}:{hasher.hexdigest()}"
    finally:
        view.release()
