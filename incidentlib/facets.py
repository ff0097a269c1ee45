"""What list filters and concept counts read of every record, kept as columns instead of the records.

``GET /incidents?component=…``, the topic and organisation counts, diagnosis by symptoms and the signal explanations
look at every incident's organisation, year, severity, draft status and concept ids (curated, and for the ``inferred``
filter the inferred links still proposed), and nothing else. Read from the records themselves, such a request kept every record
validated: about 1.3 GB at 100k incidents (docs/benchmarks.md, "Records read once and not kept"). The columns
are read in one pass that keeps no record (:func:`incidentlib.loader.each_record`), once per loaded library, and
hold only those fields, their strings shared (``sys.intern``).  After a live write the columns are patched, not
read again: :meth:`Facets.patched` reads the changed records only (``Library.refresh``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar, cast

from .loader import each_record
from .models import CONCEPT_FIELDS, INFERRED_KINDS, Incident, Severity, Status
from .requests import IncidentFilter

T = TypeVar("T")


#: Per concept field that can be inferred from text, the facet column of its inferred links still proposed
#: (read by a filter with ``inferred``): ``components`` -> ``inferred:components`` …
INFERRED_FIELDS = {field: f"inferred:{field}" for field, kind in CONCEPT_FIELDS.items() if kind in INFERRED_KINDS}
_INFERRED_KIND = {column: CONCEPT_FIELDS[field].value for field, column in INFERRED_FIELDS.items()}
#: Every column of :class:`Facets`: the curated fields, then the inferred ones.
FACET_FIELDS = (*CONCEPT_FIELDS, *INFERRED_FIELDS.values())


def incident_values(incident: Incident, field: str) -> tuple[str, ...]:
    """The ids an incident names in ``field`` of :data:`FACET_FIELDS` (``org``: its one organisation; an
    ``inferred:`` field: the concepts of its proposed inferred links of that kind)."""
    return incident_row(incident, (field,))[0]


def incident_row(incident: Incident, fields: Iterable[str]) -> list[tuple[str, ...]]:
    """:func:`incident_values` of each of ``fields``, in order, the record's proposed inferred links read once (not
    once per kind: three passes cost 1.3 s more at 100k records, ``bench/bench_facets.py``)."""
    row: list[tuple[str, ...]] = []
    by_kind: dict[str, list[str]] | None = None
    for field_name in fields:
        kind = _INFERRED_KIND.get(field_name)
        if kind is None:
            row.append((incident.org,) if field_name == "org" else tuple(getattr(incident, field_name)))
            continue
        if by_kind is None:
            by_kind = {}
            for link in incident.proposed() if incident.inferred else ():
                by_kind.setdefault(link.kind.value, []).append(link.concept)
        row.append(tuple(dict.fromkeys(by_kind.get(kind, ()))))
    return row


def passes(values: Callable[[str], tuple[str, ...]], year: int | None, severity: Severity | None,
           accepted: Mapping[str, set[str]], filters: IncidentFilter, draft: bool = False) -> bool:
    """True when an incident whose ids in a field are ``values(field)`` passes ``filters``: each accepted set
    (a concept and its narrower ones, by field) meets its ids, the year is within the bounds (inclusive; an
    incident without a year fails either bound), the severity is the one asked for and so is the review status
    (``draft``: whether the incident is a draft)."""
    if filters.status is not None and draft != (filters.status is Status.draft):
        return False
    widened = filters.with_inferred
    for field_name, ids in accepted.items():
        if ids.intersection(values(field_name)):
            continue
        inferred = INFERRED_FIELDS.get(field_name) if widened else None
        if inferred is None or not ids.intersection(values(inferred)):
            return False
    if filters.year_from is not None and (year is None or year < filters.year_from):
        return False
    if filters.year_to is not None and (year is None or year > filters.year_to):
        return False
    return filters.severity is None or severity == filters.severity


@dataclass(frozen=True)
class Facets:
    """Per incident (in the library's order): id, year, severity, whether it is a draft, and the ids of each field
    of :data:`FACET_FIELDS` (organisation and curated concepts, then the concepts of inferred links still proposed, by
    kind).  Diagnosis and the signal explanations read the curated concept columns too (which published incidents
    show a symptom, which incidents share one)."""

    ids: list[str]
    years: list[int | None]
    severities: list[Severity | None]
    values: dict[str, list[tuple[str, ...]]]
    drafts: list[bool] = field(default_factory=list)
    _holders: dict[str, dict[str, list[int]]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, incidents: Mapping[str, Incident]) -> Facets:
        ids: list[str] = []
        years: list[int | None] = []
        severities: list[Severity | None] = []
        drafts: list[bool] = []
        values: dict[str, list[tuple[str, ...]]] = {field: [] for field in FACET_FIELDS}
        fields, columns = list(values), list(values.values())
        intern = sys.intern
        for incident in each_record(incidents):
            ids.append(incident.id)
            years.append(incident.year)
            severities.append(incident.severity)
            drafts.append(incident.is_draft)
            for column, ids_in_field in zip(columns, incident_row(incident, fields), strict=True):
                column.append(tuple(map(intern, ids_in_field)))
        return cls(ids, years, severities, values, drafts)

    def patched(self, incidents: Mapping[str, Incident], changed: Collection[str]) -> Facets:
        """The columns :meth:`of` reads from ``incidents``, made from these ones and the records of ``changed`` alone:
        ``incidents`` is the data these columns were read from with only the incidents ``changed`` names added,
        replaced or removed (a live write, ``Library.refresh``).  Every other row is copied, so a write costs list
        copies over the rows (milliseconds at 100k incidents) instead of validating every record again (7-9 s).
        The holder index of each field is made again from the columns on its first use."""
        ids = list(incidents)
        at = {incident_id: row for row, incident_id in enumerate(self.ids)}
        # each row's old row, or -1 for a changed incident (read below)
        kept = [-1 if incident_id in changed else at.get(incident_id, -2) for incident_id in ids]
        if -2 in kept:
            unknown = ids[kept.index(-2)]
            raise ValueError(f"the facet columns cannot be patched: incident {unknown!r} is new but not named as changed")
        years = _spliced(self.years, kept)
        severities = _spliced(self.severities, kept)
        drafts = _spliced(self.drafts, kept)
        values = {field_name: _spliced(column, kept) for field_name, column in self.values.items()}
        intern = sys.intern
        for row, incident_id in enumerate(ids):
            if kept[row] >= 0:
                continue
            incident = incidents[incident_id]
            years[row], severities[row], drafts[row] = incident.year, incident.severity, incident.is_draft
            for column, ids_in_field in zip(values.values(), incident_row(incident, values), strict=True):
                column[row] = tuple(map(intern, ids_in_field))
        return type(self)(ids, years, severities, values, drafts)

    def holders(self, field_name: str, concept_id: str) -> list[int]:
        """The rows (ascending) of the incidents whose ``field_name`` names ``concept_id``."""
        return self._index(field_name).get(concept_id, [])

    def index_all(self) -> None:
        """Make the index of :meth:`holders` of every curated field now (a warm-up: each is otherwise made on its
        first use; nothing asks for the holders of an inferred field)."""
        for field_name in CONCEPT_FIELDS:
            self._index(field_name)

    def _index(self, field_name: str) -> dict[str, list[int]]:
        """Each concept's rows in ``field_name``, made on the field's first use in one pass over its column (a
        race makes it twice, the same)."""
        index = self._holders.get(field_name)
        if index is None:
            index = {}
            for row, ids in enumerate(self.values[field_name]):
                for concept in ids:
                    index.setdefault(concept, []).append(row)
            self._holders[field_name] = index
        return index

    def matching(self, accepted: Mapping[str, set[str]], filters: IncidentFilter) -> list[str]:
        """Ids of the incidents that pass ``filters`` (:func:`passes`), in order."""
        return [incident_id for row, incident_id in enumerate(self.ids)
                if passes(partial(self._values_at, row), self.years[row], self.severities[row], accepted, filters,
                          self.drafts[row])]

    def _values_at(self, row: int, field: str) -> tuple[str, ...]:
        return self.values[field][row]

    def concept_counts(self) -> Counter[str]:
        """How many incidents name each organisation and each concept id (curated links)."""
        counts: Counter[str] = Counter()
        for field_name in CONCEPT_FIELDS:
            for ids in self.values[field_name]:
                counts.update(ids)
        return counts



def _spliced(column: list[T], kept: list[int]) -> list[T]:
    """``column`` laid out for new rows: ``column[kept[r]]`` at each row ``r`` with ``kept[r] >= 0``; at the others
    (changed incidents) the first row's value, which the caller overwrites."""
    if len(kept) == len(column) and kept == list(range(len(column))):
        return column.copy()  # no row added, moved or changed: one C-level copy
    filler = cast(T, column[0] if column else None)
    return [column[row] if row >= 0 else filler for row in kept]
