"""Chunks kept as columns (incidentlib.search.chunks.ChunkTable): the same chunks as the chunker's, read one at a
time, and the column helpers give what reading every chunk gives."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder

from incidentlib.loader import load_library
from incidentlib.search.chunks import (
    Chunk,
    ChunkTable,
    IncidentChunks,
    StoredChunk,
    chunk_digests,
    chunk_ids,
    chunk_incident_ids,
    chunk_texts,
    incident_chunks,
    library_chunks,
)
from incidentlib.search.engine import SearchConfig, SearchEngine

IDS = ["IL-0021", "IL-0025", "IL-0126"]


def _chunks() -> tuple[list[Chunk], list[int]]:
    data = load_library("data")
    per_incident = [incident_chunks(data.incidents[i], data.vocab) for i in IDS]
    return [c for chunks in per_incident for c in chunks], [len(chunks) for chunks in per_incident]


def _table(chunks: list[Chunk]) -> ChunkTable:
    return ChunkTable([c.id for c in chunks], [c.incident_id for c in chunks], [c.kind for c in chunks],
                      [c.lang for c in chunks], [c.digest for c in chunks], [c.text for c in chunks])


def test_a_table_reads_as_the_chunks_it_holds() -> None:
    chunks, _ = _chunks()
    table = _table(chunks)
    assert len(table) == len(chunks) and table == chunks and chunks == table
    assert list(table) == chunks and all(type(chunk) is StoredChunk for chunk in table)
    assert table[0] == chunks[0] and table[-1] == chunks[-1] and table[3:7] == chunks[3:7] and table[::5] == chunks[::5]
    assert [c.digest for c in table] == [c.digest for c in chunks]
    assert pickle.loads(pickle.dumps(table[2])) == chunks[2] and type(pickle.loads(pickle.dumps(table[2]))) is Chunk
    assert table != chunks[:-1] and table != [*chunks[:-1], chunks[0]]
    with pytest.raises(IndexError):
        table[len(chunks)]
    with pytest.raises(ValueError, match="differ in length"):
        ChunkTable(["a"], [], [], [], [], [])


def test_the_column_helpers_equal_reading_every_chunk() -> None:
    chunks, _ = _chunks()
    table = _table(chunks)
    for source in (chunks, table):
        assert list(chunk_ids(source)) == [c.id for c in chunks]
        assert list(chunk_digests(source)) == [c.digest for c in chunks]
        assert list(chunk_incident_ids(source)) == [c.incident_id for c in chunks]
        assert list(chunk_texts(source)) == [c.text for c in chunks] and chunk_texts(source)[1:3] == [c.text for c in chunks[1:3]]
    assert chunk_ids(table) is table.ids  # the column itself, not a copy


def test_incident_runs_of_a_table() -> None:
    chunks, counts = _chunks()
    by_incident = IncidentChunks(_table(chunks), IDS, counts)
    assert list(by_incident) == IDS and len(by_incident) == 3 and "IL-0025" in by_incident and "IL-0001" not in by_incident
    start = 0
    for incident_id, count in zip(IDS, counts, strict=True):
        assert by_incident[incident_id] == chunks[start:start + count]
        start += count
    with pytest.raises(KeyError):
        by_incident["IL-0001"]
    with pytest.raises(ValueError, match="chunk counts"):
        IncidentChunks(_table(chunks), IDS, [*counts[:-1], counts[-1] + 1])
    # the memo of a library's chunks takes a table's runs as it takes lists
    data = load_library("data")
    memo = {i: (data.incidents[i], data.vocab, by_incident[i]) for i in IDS}
    again = library_chunks([data.incidents[i] for i in IDS], data.vocab, memo)
    assert again == chunks and all(type(chunk) is StoredChunk for chunk in again)


def test_the_engine_finds_an_incidents_title_chunk_among_its_own(tmp_path: Path, data_dir: Path) -> None:
    root = small_library(tmp_path / "lib", data_dir, IDS)
    engine = SearchEngine(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), HashEmbedder())
    titles = {(c.incident_id, c.lang): row for row, c in enumerate(engine.chunks) if c.kind == "title"}
    assert {incident_id for incident_id, _ in titles} == set(IDS)
    for (incident_id, lang), row in titles.items():
        assert engine.title_chunk(incident_id, lang) == row
    with pytest.raises(KeyError):
        engine.title_chunk(IDS[0], "xx")
