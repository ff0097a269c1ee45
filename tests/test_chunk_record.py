"""The chunk record: identity digest and per-object footprint (a 100k library holds ~1.35M)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys

import pytest

from incidentlib import Library
from incidentlib.search.chunks import MAX_CHUNK_CHARS, Chunk, incident_chunks


def test_digest_is_sha256_of_id_and_text_and_is_cached() -> None:
    chunk = Chunk(id="IL-0001/body/en/0", incident_id="IL-0001", kind="body", lang="en", text="NCCL watchdog timeout")
    expected = hashlib.sha256(b"IL-0001/body/en/0\0NCCL watchdog timeout").hexdigest()[:16]
    assert chunk.digest == expected
    assert chunk._digest == expected  # kept after the first use
    other = Chunk(id="IL-0001/body/en/0", incident_id="IL-0001", kind="body", lang="en", text="NCCL watchdog timeout!")
    assert other.digest != chunk.digest


def test_chunks_are_frozen_slotted_and_equal_by_fields() -> None:
    data = Library.open().data
    chunks = incident_chunks(next(iter(data.incidents.values())), data.vocab)
    assert chunks
    first = chunks[0]
    assert not hasattr(first, "__dict__")  # no per-object dictionary
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.text = "changed"  # type: ignore[misc]
    twin = Chunk(id=first.id, incident_id=first.incident_id, kind=first.kind, lang=first.lang, text=first.text)
    _ = first.digest  # a cached digest does not take part in equality
    assert twin == first
    assert sys.getsizeof(first) < 120


def test_a_paragraph_without_sentence_ends_is_cut_between_words() -> None:
    """A pasted log or table can run for pages with no full stop; one chunk of it would be embedded and scored whole
    (a 400 KB paragraph took gigabytes to search, and its length drowned any term in it)."""
    data = Library.open().data
    incident = next(iter(data.incidents.values()))
    words = [f"tok{i}" for i in range(30_000)]
    blob = "x" * (3 * MAX_CHUNK_CHARS + 7)  # one "word" longer than a chunk: cut where the limit falls
    body = " ".join(words[:100]) + f" {blob} " + " ".join(words[100:])
    long = incident.model_copy(update={"body": incident.body.model_copy(update={"en": body})})
    pieces = [c.text for c in incident_chunks(long, data.vocab) if c.kind == "body" and c.lang == "en"]
    assert len(pieces) > 30_000 * 6 // MAX_CHUNK_CHARS
    assert all(0 < len(piece) <= MAX_CHUNK_CHARS for piece in pieces)
    assert " ".join(pieces).replace(" ", "") == body.replace(" ", "")  # nothing lost, nothing repeated
    known = set(words)
    assert all(token in known or set(token) == {"x"} for piece in pieces for token in piece.split())  # words whole


def test_no_chunk_is_longer_than_the_limit_when_pieces_meet_at_it() -> None:
    """Two sentences whose lengths add up to the limit exactly do not fit once the space between them is counted."""
    data = Library.open().data
    incident = next(iter(data.incidents.values()))
    half = MAX_CHUNK_CHARS // 2 - 1
    for body in ("a" * half + ". " + "b" * half + ".", " ".join(["word"] * 2000)):
        long = incident.model_copy(update={"body": incident.body.model_copy(update={"en": body})})
        pieces = [c.text for c in incident_chunks(long, data.vocab) if c.kind == "body" and c.lang == "en"]
        assert max(len(piece) for piece in pieces) <= MAX_CHUNK_CHARS, [len(piece) for piece in pieces]
