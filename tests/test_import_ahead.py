"""The import's per-record work done ahead in a worker process (incidentlib/importing/ahead.py): the same results and
the same import as in one process, a worker that dies mid-way, and the rules of its use."""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_library

from incidentlib import Library
from incidentlib.importing import ImportFailed, ImportFormat, ImportOptions, ahead, run_import
from incidentlib.importing.duplicates import Fingerprints
from incidentlib.importing.pipeline import _RecordDocuments, _RecordWork
from incidentlib.importing.yaml_out import encoded_records
from incidentlib.search.boilerplate import Boilerplate
from incidentlib.tagging.signals import SignalConcepts
from incidentlib.tagging.tagger import ConceptTagger, incident_text


@pytest.fixture(scope="module")
def work(library: Library) -> _RecordWork:
    """The import's own work: names, loose names and error signals, and the duplicate check's fingerprints."""
    from incidentlib.analysis.families import compile_table
    from incidentlib.analysis.tables import load_signals

    signals = SignalConcepts(compile_table(load_signals(library.root, library.vocab)), library.vocab)
    texts = [incident.summary.en for incident in library.incidents()]
    return _RecordWork(ConceptTagger(library.vocab, signals=signals), Fingerprints(Boilerplate(texts)))


@pytest.fixture(scope="module")
def items(library: Library) -> list[tuple[str, tuple[str, ...]]]:
    """Every record's text in each language, with its title and summary as the duplicate check compares them."""
    return [(text, (incident.title.get(lang) or "", incident.summary.get(lang) or ""))
            for incident in library.incidents() for lang in ("en", "ko") if (text := incident_text(incident, lang))]


def test_the_worker_gives_what_one_process_gives(work: _RecordWork, items: list) -> None:
    expected = work(items)
    assert sum(len(links) for links, _ in expected) > 500  # the texts hold many names and signals
    asked = sorted(random.Random(3).sample(range(len(items)), len(items) * 2 // 3))  # an import skips rejected records
    with ahead.WorkAhead(len(items), workers=1, min_items=0) as worker:
        assert worker.parallel
        worker.start(work, items)
        got = {index: worker.result(index) for index in asked}
        assert worker.by_worker > 0  # the worker did its share: not everything was done here
    assert got == {index: expected[index] for index in asked}


def test_records_written_out_by_the_worker_are_the_ones_written_here(library: Library) -> None:
    documents = _RecordDocuments(library.incidents())  # each document made when its batch is taken
    with ahead.WorkAhead(len(documents), workers=1, min_items=0) as worker:
        worker.start(encoded_records, documents)
        deadline = time.monotonic() + 120
        while worker.by_worker == 0 and time.monotonic() < deadline:  # let the worker answer before asking
            time.sleep(0.05)
        assert worker.by_worker > 0
        payloads = [worker.result(index) for index in range(len(documents))]
    made = documents[:]
    assert payloads == encoded_records(made)
    assert all(yaml.safe_load(payload.decode("utf-8")) == doc for payload, doc in zip(payloads, made, strict=True))
    assert [doc["id"] for doc in made] == [incident.id for incident in library.incidents()]


class _CountedItems(list[Any]):
    """A list that records the index of every item taken from it by slicing, as WorkAhead takes its batches (from two
    threads: ``list.extend`` of a range is one step under the GIL, where ``+=`` on a count is several)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(items)
        self.taken: list[int] = []

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            self.taken.extend(range(*index.indices(len(self))))
        return super().__getitem__(index)


def test_each_item_is_taken_once_whoever_works_on_it(work: _RecordWork, items: list) -> None:
    # a sequence may make its items when they are taken (an import's record documents): the worker's answers are
    # checked by their batch's size, not by taking the batch again
    counted = _CountedItems(items)
    with ahead.WorkAhead(len(counted), workers=1, min_items=0) as worker:
        worker.start(work, counted)
        got = [worker.result(index) for index in range(len(counted))]
        assert worker.by_worker > 0
    assert sorted(counted.taken) == list(range(len(items)))
    assert got == work(items)


def test_a_worker_that_dies_costs_time_not_the_result(work: _RecordWork, items: list,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    expected = work(items)
    with ahead.WorkAhead(len(items), workers=1, min_items=0) as worker, caplog.at_level(logging.WARNING):
        worker.start(work, items)
        first = worker.result(0)
        assert worker._process is not None
        worker._process.kill()  # out of memory, say
        rest = [worker.result(index) for index in range(1, len(items))]
    assert [first, *rest] == expected
    assert "import worker failed" in caplog.text


def test_no_worker_below_the_size_or_when_none_is_wanted(work: _RecordWork, items: list,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert not ahead.WorkAhead(len(items), workers=1).parallel  # fewer than PARALLEL_MIN_ITEMS
    assert not ahead.WorkAhead(len(items), workers=0, min_items=0).parallel
    monkeypatch.setenv(ahead.WORKERS_ENV, "0")
    worker = ahead.WorkAhead(len(items), min_items=0)
    assert not worker.parallel
    worker.start(work, items)
    assert [worker.result(i) for i in range(5)] == work(items[:5])


def test_indexes_must_not_decrease_and_the_work_comes_first(work: _RecordWork, items: list) -> None:
    worker: ahead.WorkAhead = ahead.WorkAhead(len(items), workers=0)
    with pytest.raises(RuntimeError, match="before start"):
        worker.result(0)
    worker.start(work, items)
    worker.result(40)
    with pytest.raises(ValueError, match=r"result\(3\) asked after result\(40\)"):
        worker.result(3)
    with pytest.raises(RuntimeError, match="called twice"):
        worker.start(work, items)


@pytest.mark.parametrize(("value", "message"), [("two", "whole number"), ("-1", "cannot be negative")])
def test_a_bad_worker_setting_is_named(monkeypatch: pytest.MonkeyPatch, value: str, message: str, tmp_path: Path,
                                       data_dir: Path) -> None:
    monkeypatch.setenv(ahead.WORKERS_ENV, value)
    with pytest.raises(ValueError, match=message):
        ahead.default_workers()
    source = tmp_path / "records.jsonl"
    source.write_text(json.dumps({"title": "A deploy broke DNS", "org": "Acme", "url": "https://acme.example/1"}) + "\n")
    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    with pytest.raises(ImportFailed, match=f"{ahead.WORKERS_ENV}={value!r}"):
        run_import(source, target, ImportOptions(format=ImportFormat.jsonl))


def test_an_import_with_a_worker_writes_what_one_process_writes(library: Library, tmp_path: Path, data_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Records of the bundled library's texts, some repeated (near-duplicates to reject), imported twice."""
    rng = random.Random(5)
    incidents = library.incidents()
    lines = []
    for n in range(300):
        source = incidents[n % len(incidents)]
        words = " ".join(rng.choices(source.summary.en.split(), k=30))
        record = {"title": f"Ticket {n}: {source.title.en}", "summary": f"{source.summary.en} {words}",
                  "body": source.body.en or "", "org": source.org, "url": f"https://tickets.example/{n}"}
        lines.append(json.dumps(record))
        if n % 7 == 6:
            lines.append(json.dumps({**record, "url": f"https://tickets.example/{n}-again"}))
    archive = tmp_path / "archive.jsonl"
    archive.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(ahead, "PARALLEL_MIN_ITEMS", 0)
    monkeypatch.setattr(ahead, "BATCH_ITEMS", 8)  # many batches, claimed by both processes
    written = {}
    for workers in ("1", "0"):
        monkeypatch.setenv(ahead.WORKERS_ENV, workers)
        target = small_library(tmp_path / f"lib-{workers}", data_dir, ["IL-0101", "IL-0076"])
        fresh = tmp_path / f"new-{workers}"  # a new library: written in a scratch folder, then renamed into place
        with caplog.at_level(logging.DEBUG, logger=ahead.__name__):
            report = run_import(archive, target, ImportOptions(format=ImportFormat.jsonl))
            run_import(archive, fresh, ImportOptions(format=ImportFormat.jsonl, id_prefix="TK"))
        assert report.written and any(r.duplicate_of for r in report.rejected)
        written[workers] = ({p.name: p.read_text(encoding="utf-8") for p in sorted((target / "incidents").glob("*.yaml"))},
                            report.model_dump(exclude={"into"}))
        written[f"new-{workers}"] = {p.name: p.read_bytes() for p in sorted((fresh / "incidents").glob("*.yaml"))}
    assert written["1"] == written["0"]
    assert written["new-1"] == written["new-0"] and len(written["new-1"]) >= len(written["1"][0]) > 250
    did = [int(record.args[0]) for record in caplog.records if record.msg.startswith("the import worker did")]
    # two imports had workers: for the records, which did part of them, and for writing them out as YAML (which a
    # worker may not reach before this process has written these few)
    assert len(did) == 4 and did[0] > 0 and did[2] > 0
    assert any("inferred" in text for text in written["1"][0].values())


def test_the_worker_stays_a_bounded_lead_ahead(work: _RecordWork, items: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its answers wait in memory until asked for: it is given no more than MAX_LEAD_BATCHES beyond the last asked."""
    import time

    monkeypatch.setattr(ahead, "BATCH_ITEMS", 4)
    monkeypatch.setattr(ahead, "MAX_LEAD_BATCHES", 3)
    expected = work(items)
    with ahead.WorkAhead(len(items), workers=1, min_items=0) as worker:
        worker.start(work, items)
        assert worker.result(0) == expected[0]
        deadline = time.monotonic() + 60
        while worker.by_worker < 3 * 4 and time.monotonic() < deadline:  # the worker reaches its lead, then stops
            time.sleep(0.05)
        time.sleep(0.5)
        assert worker._next_batch == 1 + 3  # batch 0 (asked), then three more; none beyond
        assert worker.by_worker <= 4 * 4  # batch 0 too, if the worker claimed it before it was asked for
        assert [worker.result(index) for index in range(1, len(items))] == expected[1:]
        assert worker.by_worker > 4 * 4  # asked further, it went on
