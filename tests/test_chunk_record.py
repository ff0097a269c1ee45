"""The chunk record: identity digest and per-object footprint (a 100k library holds ~1.35M)."""

from __future__ import annotations

import dataclasses
import hashlib
import sys

import pytest

from incidentlib import Library
from incidentlib.search.chunks import Chunk, incident_chunks


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
