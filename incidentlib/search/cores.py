"""How many cores this process may run on: the bound for the search package's threads and worker processes."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may be scheduled on (its CPU affinity, which a container or ``taskset`` narrows),
    else the machine's count where affinity is not available; at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def configured_workers(variable: str) -> int | None:
    """The number of worker processes the environment variable ``variable`` sets, or ``None`` when it is not set;
    a value that is not a whole number of at least 0 is a ``ValueError`` naming the variable."""
    configured = os.environ.get(variable)
    if configured is None:
        return None
    try:
        workers = int(configured)
    except ValueError:
        raise ValueError(f"{variable}={configured!r}: expected a whole number of worker processes") from None
    if workers < 0:
        raise ValueError(f"{variable}={configured!r}: the number of worker processes cannot be negative")
    return workers
