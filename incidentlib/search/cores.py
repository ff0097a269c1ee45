"""How many cores this process may run on: the bound for the search package's threads and worker processes."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may be scheduled on (its CPU affinity, which a container or ``taskset`` narrows),
    else the machine's count where affinity is not available; at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
