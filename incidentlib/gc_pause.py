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


@contextmanager
def built_for_process_lifetime() -> Iterator[None]:
    """Run the block with the cyclic collector off, then move every object alive at its end out of the collector's
    reach (:func:`gc.freeze`) and turn the collector back on (when it was on before).

    For a long-lived process (``serve``, ``mcp``) around the load of its library: the records, chunks and indexes
    live as long as the process, and without this every later full pass walks all of them (about 0.5 s per pass at
    10k incidents, 2.7M tracked objects, and ten times that at 100k), while requests and background builds keep
    triggering passes.  Frozen objects are still freed by reference counting when dropped, but frozen cycles are
    not: cyclic garbage alive at the freeze (the little a start leaves behind) is never reclaimed, and a library
    that drops what it built (a live write) gives everything back to the collector first (:func:`release_frozen`).
    Frozen objects are also not written to by the collector, so processes forked afterwards (the SPARQL graph
    process) keep sharing their pages.  Not for library code: the freeze applies to the whole
    process, which only its entry point may decide."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()  # not after a failed block: its caller stops, or goes on without what it meant to keep
    finally:
        if was_enabled:
            gc.enable()


def release_frozen() -> None:
    """Give every frozen object back to the collector (:func:`gc.unfreeze`), when any is frozen.

    Called when a library drops what a start built (a live write replaces the records and the search engine):
    frozen objects are freed by reference counting, but some of what is dropped sits in reference cycles (a
    search engine does), and a frozen cycle is never reclaimed: every write would keep a whole engine alive.
    After this the collector walks everything again, as without :func:`built_for_process_lifetime`; what the
    freeze saved is the passes until the first write."""
    if gc.get_freeze_count():
        gc.unfreeze()
