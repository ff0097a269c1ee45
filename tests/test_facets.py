"""List filters and concept counts read from the facet columns (incidentlib.facets): the same ids and counts as
checking every record, and, from a start snapshot, no record kept for them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import small_library

from incidentlib import start_snapshot
from incidentlib.library import Library
from incidentlib.models import Incident
from incidentlib.requests import IncidentFilter
from incidentlib.search.engine import SearchConfig


def _filters(library: Library) -> list[IncidentFilter]:
    records = library.incidents()
    years = sorted({i.year for i in records if i.year is not None})
    severities = sorted({i.severity for i in records if i.severity is not None})
    chosen = [IncidentFilter(component=c) for c in sorted({c for i in records for c in i.components})[:6]]
    chosen += [IncidentFilter(cause=c, year_from=years[len(years) // 2]) for c in sorted({c for i in records for c in i.causes})[:4]]
    chosen += [IncidentFilter(org=records[0].org), IncidentFilter(tag=sorted({t for i in records for t in i.tags})[0])]
    chosen += [IncidentFilter(year_to=years[1], severity=severities[0]), IncidentFilter(symptom=records[0].symptoms[0])]
    chosen += [IncidentFilter(component="infiniband-fabric", cause=records[0].causes[0], year_from=years[0], year_to=years[-1])]
    return chosen


def _passes_directly(incident: Incident, filters: IncidentFilter, accepted: dict[str, set[str]]) -> bool:
    """The filter rule read straight off one record (written here, apart from the library's code)."""
    for field, ids in accepted.items():
        values = {incident.org} if field == "org" else set(getattr(incident, field))
        if not values & ids:
            return False
    if filters.year_from is not None and (incident.year is None or incident.year < filters.year_from):
        return False
    if filters.year_to is not None and (incident.year is None or incident.year > filters.year_to):
        return False
    return filters.severity is None or incident.severity == filters.severity


def test_filters_and_counts_from_the_facets_are_those_of_every_record(library: Library) -> None:
    records = library.incidents()
    nonempty = 0
    for filters in _filters(library):
        accepted = library.resolve_filter(filters)
        expected = [i.id for i in records if _passes_directly(i, filters, accepted)]
        assert library.filter_ids(filters) == expected, filters
        assert [i.id for i in records if library.matches(i, filters, accepted)] == expected, filters
        nonempty += bool(expected) and len(expected) < len(records)
    assert nonempty >= 5  # the filters do narrow the list
    counts: Counter[str] = Counter()
    for incident in records:
        for ids in incident.concept_ids().values():
            counts.update(ids)
    assert library._incident_counts() == counts


def test_a_library_from_the_snapshot_keeps_no_record_for_filters(tmp_path: Path, data_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # a part per record: what is kept is countable
    root, cache = small_library(tmp_path / "lib", data_dir, ["IL-0021", "IL-0025", "IL-0126", "IL-0133"]), tmp_path / "cache"
    first = Library.open(root, SearchConfig(cache_dir=cache))
    _ = first._search_engine.chunks
    assert first.save_start_snapshot()
    expected = sorted(i.id for i in first.incidents() if "infiniband-fabric" in i.components)
    assert 0 < len(expected) < 4
    library = Library.open(root, SearchConfig(cache_dir=cache))
    records = library.data.incidents
    assert isinstance(records, start_snapshot.RecordParts) and records.validated == 0
    page = library.list_incidents(IncidentFilter(component="infiniband-fabric"))
    assert sorted(item.id for item in page.items) == expected and page.total == len(expected)
    assert records.validated == len(expected)  # the records shown, not the ones the filter passed over
    assert library._incident_counts()["infiniband-fabric"] == len(expected) and records.validated == len(expected)


def test_the_facets_follow_the_data_and_do_not_hold_replaced_data(tmp_path: Path, data_dir: Path) -> None:
    import dataclasses
    import gc
    import weakref

    root = small_library(tmp_path / "lib", data_dir, ["IL-0021", "IL-0025", "IL-0126", "IL-0133"])
    library = Library.open(root, SearchConfig(cache_dir=tmp_path / "cache"))
    nccl = IncidentFilter(component="nccl")
    before = library.filter_ids(nccl)
    assert before
    dropped = before[0]
    base = library.data
    # as live writes replace it: first without one incident, then as it was
    library.data = dataclasses.replace(base, incidents={i: r for i, r in base.incidents.items() if i != dropped})
    assert library.filter_ids(nccl) == before[1:]
    replaced = weakref.ref(library.data)
    library.data = dataclasses.replace(base, incidents=dict(base.incidents))
    gc.collect()
    assert replaced() is None  # the facets do not hold the data they were read from
    assert library.filter_ids(nccl) == before
