"""Pausing Python's cyclic garbage collector while a library's records are made in bulk.

Loading N records makes millions of small objects that are never cyclic garbage (validated records, their
strings and lists, chunks).  The collector is triggered by allocations; each full (oldest-generation) pass
walks every live object, and full passes keep coming while the heap grows, so a bulk load of N objects
costs on the order of N² object visits.  Measured on the start snapshot of 100k records (1.35M chunks):
53 s with the collector on against 29 s paused, in one run on a loaded machine (docs/benchmarks.md).
Reference counting still frees every object that becomes unreachable; only the search for cycles waits
until the load ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off; it is turned back on after (when it was on before), so nested
    pauses and a caller that had turned it off itself keep their state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
