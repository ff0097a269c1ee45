"""List filters and concept counts read from the facet columns (incidentlib.facets): the same ids and counts as
checking every record, and, from a start snapshot, no record kept for them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib import start_snapshot
from incidentlib.library import Library
from incidentlib.loader import load_library
from incidentlib.models import CONCEPT_FIELDS, Incident
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
    # as live writes replace it (each with a content hash of its own): first without one incident, then as it was
    library.data = dataclasses.replace(base, incidents={i: r for i, r in base.incidents.items() if i != dropped},
                                       content_hash="without-one")
    assert library.filter_ids(nccl) == before[1:]
    replaced = weakref.ref(library.data)
    library.data = dataclasses.replace(base, incidents=dict(base.incidents), content_hash="as-it-was")
    gc.collect()
    assert replaced() is None  # the facets do not hold the data they were read from
    assert library.filter_ids(nccl) == before


def _from_snapshot(root: Path, cache: Path) -> tuple[Library, start_snapshot.RecordParts]:
    """The library at ``root`` opened from the start snapshot a first opening saved, and its records by part."""
    first = Library.open(root, SearchConfig(cache_dir=cache))
    _ = first._search_engine.chunks
    assert first.save_start_snapshot()
    snapshot = Library.open(root, SearchConfig(cache_dir=cache))
    parts = snapshot.data.incidents
    assert isinstance(parts, start_snapshot.RecordParts)
    return snapshot, parts


def test_diagnosis_and_signal_explanations_read_the_columns(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which incidents hold a concept, and the drafts, come from the columns as from the records; a diagnosis by
    symptoms scores each cause as the rule written here does (for each symptom, the published incidents showing it
    share 1 among their causes), and from a start snapshot it validates only the incidents it shows."""
    library = Library.open(data_dir)
    facets = library._facets
    records = library.incidents()
    assert facets.drafts == [i.is_draft for i in records]
    for field in ("components", "causes", "symptoms", "org"):
        for concept in {c for i in records for c in ((i.org,) if field == "org" else getattr(i, field))}:
            rows = facets.holders(field, concept)
            assert [facets.ids[r] for r in rows] == [i.id for i in records if concept in ((i.org,) if field == "org" else getattr(i, field))]
    assert facets.holders("symptoms", "no-such-symptom") == []

    symptoms = ["collective-timeout", "xid-errors"]
    expected: Counter[str] = Counter()
    for symptom in symptoms:
        showing = [i for i in records if not i.is_draft and symptom in i.symptoms]
        for incident in showing:
            for cause in incident.causes:
                expected[cause] += 1 / (len(showing) * len(symptoms))
    diagnosis = library.diagnose(symptoms=symptoms, limit=50)
    assert {c.id: c.score for c in diagnosis.causes} == {c: round(s, 4) for c, s in expected.most_common(50)}

    from incidentlib.analysis.signatures import PHRASES, SIGNALS_SHOWN

    explained = 0
    for signal in library.signals():  # the incidents that share a symptom, named as a scan of the records names them
        owner = library.get(signal.incident_id)
        sharing = sorted({i.id for i in records if i.id != owner.id and set(i.symptoms) & set(owner.symptoms)})
        if sharing:
            assert PHRASES["en"]["others"].format(len(sharing), ", ".join(sharing[:SIGNALS_SHOWN])) in signal.explanation
            explained += 1
    assert explained > 10

    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # a part per record: what is read is countable
    snapshot, parts = _from_snapshot(small_library(tmp_path / "lib", data_dir, [i.id for i in records[:40]]), tmp_path / "cache")
    shown = snapshot.diagnose(symptoms=symptoms)
    evidence = {e.id for c in [*shown.causes, *shown.components] for e in c.evidence}
    assert shown.causes and parts.validated == len(evidence) < 40


def test_signal_explanations_share_who_shares_a_symptom_set(data_dir: Path) -> None:
    """Explaining every signal with one memo of the symptom sets' sharers gives, signal by signal, the explanation
    made without it; the sharers of a set are counted and named as a scan of the records does, the incident
    explained left out."""
    from incidentlib.analysis.signatures import SIGNALS_SHOWN, Sharers, explain, explain_in, library_signals

    library = Library.open(data_dir)
    data, facets, records = library.data, library._facets, library.incidents()
    sharers: dict[tuple[str, ...], Sharers] = {}
    signals = library_signals(data)
    for signal in signals:
        owner = data.incidents[signal.incident_id]
        assert explain_in(owner, data.vocab, facets, signal.text, "ko", sharers) == explain(data, facets, signal, "ko")
    assert 0 < len(sharers) < len(signals)  # signals of one incident, and incidents with one symptom set, share

    owner = max(records, key=lambda i: len(i.symptoms))
    key = tuple(sorted(set(owner.symptoms)))
    holding = sorted(i.id for i in records if set(i.symptoms) & set(key))
    shared = Sharers.of(facets, key)
    assert shared.count == len(holding) > SIGNALS_SHOWN + 1
    assert shared.first == tuple(holding[: SIGNALS_SHOWN + 1])


def test_signal_explanations_keep_no_record(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a start snapshot, explaining every signal reads each record once in a pass and keeps none, and gives
    the explanations a library loaded from its files gives."""
    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # a part per record: what is kept is countable
    root = small_library(tmp_path / "lib", data_dir, [i.id for i in Library.open(data_dir).incidents()[:60]])
    snapshot, parts = _from_snapshot(root, tmp_path / "cache")
    kept = parts.validated
    explained = snapshot.signals(lang="ko")
    assert parts.validated == kept
    assert explained == Library.open(root).signals(lang="ko")
    assert len(explained) > 10


def test_prepare_facets_reads_the_columns_ahead(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After ``prepare_facets`` (what ``serve`` runs after its first answer), a filtered list, the organisation
    counts and a diagnosis by symptoms read no column again, and their answers are those of a library that read
    the columns on demand."""
    from incidentlib import facets as facets_module

    monkeypatch.setattr(start_snapshot, "RECORDS_PER_PART", 1)  # a part per record: what is read is countable
    root = small_library(tmp_path / "lib", data_dir, [i.id for i in Library.open(data_dir).incidents()[:60]])
    on_demand = Library.open(root)
    nccl, symptom = IncidentFilter(component="nccl"), on_demand.incidents()[0].symptoms[0]
    expected = on_demand.filter_ids(nccl), on_demand.organizations(), on_demand.diagnose(symptoms=[symptom])
    snapshot, parts = _from_snapshot(root, tmp_path / "cache")
    snapshot.prepare_facets()
    assert set(snapshot._facets._holders) == set(CONCEPT_FIELDS) < set(snapshot._facets.values)  # inferred: unasked

    def read_again(*_: object) -> None:
        raise AssertionError("the facet columns were read again")

    monkeypatch.setattr(facets_module.Facets, "of", classmethod(read_again))
    before = parts.validated
    shown = snapshot.diagnose(symptoms=[symptom])
    assert (snapshot.filter_ids(nccl), snapshot.organizations(), shown) == expected
    assert expected[0]
    evidence = {e.id for c in [*shown.causes, *shown.components] for e in c.evidence}
    assert parts.validated - before <= len(evidence)  # only records a diagnosis shows are read


def test_a_live_write_patches_the_columns_instead_of_reading_every_record(tmp_path: Path, data_dir: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns in use when a write lands are patched with the changed incidents: after a draft is added, edited,
    published, rejected, a published incident deleted and restored, they equal the columns read afresh from the
    data, and no write read them from every record."""
    from incidentlib import facets as facets_module

    root = small_library(tmp_path / "lib", data_dir, [i.id for i in Library.open(data_dir).incidents()[:12]])
    library = Library(load_library(root), embedder=HashEmbedder())
    first = library.incidents()[0]
    assert library.filter_ids(IncidentFilter(org=first.org))  # the columns are read here, once
    read_from_every_record = facets_module.Facets.of

    def not_again(*_: object) -> None:
        raise AssertionError("the facet columns were read from every record again")

    monkeypatch.setattr(facets_module.Facets, "of", classmethod(not_again))

    def columns(facets: facets_module.Facets) -> tuple[object, ...]:
        return facets.ids, facets.years, facets.severities, facets.drafts, facets.values

    doc = {"org": "meta", "title": {"en": "Checkpoint stalls"}, "summary": {"en": "Jobs stalled writing checkpoints."},
           "body": {"en": "The storage tier stopped answering."}, "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}]}
    record = library.create_draft(doc)
    steps = [
        lambda: library.update_incident(record.id, {"date": "2024-05", "components": ["gpu"], "severity": "sev2",
                                                    "title": {"ko": "체크포인트 지연"},
                                                    "summary": {"ko": "체크포인트 저장 중 학습 작업이 멈췄다."}}, record.etag),
        lambda: library.publish(record.id),
        lambda: library.reject(library.create_draft({**doc, "title": {"en": "Rejected"}}).id),
        lambda: library.delete(first.id),
        lambda: library.restore(first.id),
    ]
    seen = [columns(library._facets)]
    for step in steps:
        step()
        seen.append(columns(library._facets))
        assert seen[-1] == columns(read_from_every_record.__func__(facets_module.Facets, library.data.incidents))
    assert record.id in seen[0][0] and first.id not in seen[4][0] and first.id in seen[5][0]
    assert seen[0][3][seen[0][0].index(record.id)] and not seen[2][3][seen[2][0].index(record.id)]  # draft, published
    assert seen[1][4]["components"][seen[1][0].index(record.id)] == ("gpu",)
    assert seen[3][0] == seen[2][0]  # the rejected draft came and went
    assert library.filter_ids(IncidentFilter(component="gpu", severity="sev2")) == [record.id]
    gone = library.data.incidents
    with pytest.raises(ValueError, match="new but not named as changed"):
        facets_module.Facets([], [], [], {field: [] for field in library._facets.values}, []).patched(gone, set())


def test_a_write_during_the_first_read_of_the_columns_does_not_wait_and_is_patched_in(
        tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that lands while the columns are being read for the first time (seconds at 100k) neither waits for
    that read nor makes the next use read them again: its step is recorded, and the next use patches the columns
    just read along it."""
    import threading

    from incidentlib import facets as facets_module

    root = small_library(tmp_path / "lib", data_dir, [i.id for i in Library.open(data_dir).incidents()[:12]])
    library = Library(load_library(root), embedder=HashEmbedder())
    read_from_every_record = facets_module.Facets.of.__func__
    reading, release, reads = threading.Event(), threading.Event(), []

    def slow_read(cls: type[facets_module.Facets], incidents: object) -> facets_module.Facets:
        reads.append(1)
        reading.set()
        assert release.wait(60), "the read was never released"
        return read_from_every_record(cls, incidents)

    monkeypatch.setattr(facets_module.Facets, "of", classmethod(slow_read))
    org = library.incidents()[0].org
    reader = threading.Thread(target=library.filter_ids, args=(IncidentFilter(org=org),), daemon=True)
    reader.start()
    assert reading.wait(30)
    doc = {"org": org, "title": {"en": "Checkpoint stalls"}, "summary": {"en": "Jobs stalled writing checkpoints."},
           "body": {"en": "The storage tier stopped answering."},
           "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}]}
    stored: list[str] = []
    writer = threading.Thread(target=lambda: stored.append(library.create_draft(doc).id), daemon=True)
    writer.start()
    writer.join(30)
    assert not writer.is_alive() and stored  # the write did not wait for the read under way
    assert reader.is_alive()  # which is still under way
    release.set()
    reader.join(30)
    ids = library.filter_ids(IncidentFilter(org=org))
    assert stored[0] in ids and reads == [1]  # patched along the recorded step, not read again
    fresh = read_from_every_record(facets_module.Facets, library.data.incidents)
    assert (library._facets.ids, library._facets.values) == (fresh.ids, fresh.values)
