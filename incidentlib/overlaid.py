"""A library's records after live writes: the loaded records with the changed ones laid over them, none copied.

A write to a live library replaces, adds or removes a few records.  Copying the loaded records into a new dict to
apply it read every record; from a start snapshot that validated all of them (about 20 s and 1.3 GB at 100k
incidents, docs/benchmarks.md "A write at 100k").  :class:`OverlaidRecords` reads a changed record from the
changes and any other from the records it was laid over, so a write reads only its own records.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import Incident


class OverlaidRecords(Mapping[str, "Incident"]):
    """``base`` (records by id, in id order) with ``changes`` laid over it: id → the record now, or None when it is
    gone.  In id order, as the loader gives records.  Laid over another :class:`OverlaidRecords`, it takes that one's
    base and adds its changes to that one's (later ones win), so a lookup is one or two dictionary reads however many
    writes came before."""

    def __init__(self, base: Mapping[str, Incident], changes: Mapping[str, Incident | None]) -> None:
        if isinstance(base, OverlaidRecords):
            changes = {**base.changes, **changes}
            base = base.base
        self.base: Mapping[str, Incident] = base
        self.changes: dict[str, Incident | None] = dict(changes)
        gone = {incident_id for incident_id, record in self.changes.items() if record is None}
        added = sorted(incident_id for incident_id, record in self.changes.items()
                       if record is not None and incident_id not in base)
        self._ids = list(heapq.merge((i for i in base if i not in gone), added))

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __contains__(self, key: object) -> bool:
        if key in self.changes:
            return self.changes[key] is not None
        return key in self.base

    def __getitem__(self, key: str) -> Incident:
        if key in self.changes:
            record = self.changes[key]
            if record is None:
                raise KeyError(key)
            return record
        return self.base[key]

    def scan(self) -> Iterator[Incident]:
        """Every record in the order of iteration, the base's read by :func:`~incidentlib.loader.each_record` (a pass
        that keeps none of a start snapshot's records)."""
        from .loader import each_record

        changes = self.changes
        added = sorted(((incident_id, record) for incident_id, record in changes.items()
                        if record is not None and incident_id not in self.base), key=lambda pair: pair[0])
        at = 0
        for record in each_record(self.base):
            if record.id in changes:
                changed = changes[record.id]
                if changed is None:  # gone
                    continue
                record = changed
            while at < len(added) and added[at][0] < record.id:  # as the ids merge them (``heapq.merge``)
                yield added[at][1]
                at += 1
            yield record
        for _, record in added[at:]:
            yield record
