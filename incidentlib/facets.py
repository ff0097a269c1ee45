"""What list filters and concept counts read of every record, kept as columns instead of the records.

``GET /incidents?component=…`` and the topic counts look at every incident's organisation, year, severity and
curated concept ids, and nothing else. Read from the records themselves, such a request kept every record
validated: about 1.3 GB at 100k incidents (docs/benchmarks.md, "Records read once and not kept"). The columns
are read in one pass that keeps no record (:func:`incidentlib.loader.each_record`), once per loaded library, and
hold only those fields, their strings shared (``sys.intern``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from .loader import each_record
from .models import Incident, Severity

#: The incident fields a concept filter reads (``IncidentFilter``'s concept filters) and the organisation.
CONCEPT_FIELDS = ("components", "causes", "symptoms", "tags")


@dataclass(frozen=True)
class Facets:
    """Per incident (in the library's order): id, organisation, year, severity and curated concept ids by field."""

    ids: list[str]
    orgs: list[str]
    years: list[int | None]
    severities: list[Severity | None]
    concepts: dict[str, list[tuple[str, ...]]]

    @classmethod
    def of(cls, incidents: Mapping[str, Incident]) -> Facets:
        ids: list[str] = []
        orgs: list[str] = []
        years: list[int | None] = []
        severities: list[Severity | None] = []
        concepts: dict[str, list[tuple[str, ...]]] = {field: [] for field in CONCEPT_FIELDS}
        intern = sys.intern
        for incident in each_record(incidents):
            ids.append(incident.id)
            orgs.append(intern(incident.org))
            years.append(incident.year)
            severities.append(incident.severity)
            for field, column in concepts.items():
                column.append(tuple(intern(value) for value in getattr(incident, field)))
        return cls(ids, orgs, years, severities, concepts)

    def matching(self, accepted: Mapping[str, set[str]], year_from: int | None, year_to: int | None,
                 severity: Severity | None) -> list[str]:
        """Ids whose organisation (field ``org``) or concept ids meet every accepted set, with the year in
        ``[year_from, year_to]`` (an incident without a year fails either bound) and the severity, in order."""
        kept = []
        for row, incident_id in enumerate(self.ids):
            if any(not ({self.orgs[row]} if field == "org" else set(self.concepts[field][row])) & ids
                   for field, ids in accepted.items()):
                continue
            year = self.years[row]
            if year_from is not None and (year is None or year < year_from):
                continue
            if year_to is not None and (year is None or year > year_to):
                continue
            if severity is None or self.severities[row] == severity:
                kept.append(incident_id)
        return kept

    def concept_counts(self) -> Counter[str]:
        """How many incidents name each concept id (curated links) and each organisation."""
        counts: Counter[str] = Counter(self.orgs)
        for column in self.concepts.values():
            for values in column:
                counts.update(values)
        return counts
