"""eval/postmortems_icco.py: Markdown postmortems with front matter -> an importable collection and a
separate labels file; the labels (categories) and the keywords chosen with them never enter a record."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import eval_script

from incidentlib.importing import ImportFormat, ImportOptions, run_import

POSTMORTEM = """---
uuid: 11111111-0000-0000-0000-000000000001
url: https://example.com/pm/lock-service
title: Storage nodes drop out after a power loss
categories:
- hardware
- cascading-failure
keywords:
- zebrafinch
- power loss
company: Example Cloud
product: Example Store
start_time: 2019-06-13T21:16:00Z
summary: Storage nodes lost power; the lock service overloaded and healthy nodes left the cluster.
---

Several storage nodes lost power at once. Their de-registration overloaded the lock service,
handshakes timed out, and healthy nodes removed themselves from the cluster.
"""

UNLABELLED = """---
uuid: 11111111-0000-0000-0000-000000000002
url: https://example.com/pm/cert
company: Example Mail
categories: []
---

An expired certificate on the mail gateway broke TLS handshakes for two hours.
"""


@pytest.fixture(scope="module")
def converter() -> ModuleType:
    return eval_script("postmortems_icco")


def test_records_keep_text_and_source_and_never_the_labels(converter: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(POSTMORTEM, encoding="utf-8")
    (tmp_path / "b.md").write_text(UNLABELLED, encoding="utf-8")
    records, labels = converter.convert(tmp_path)
    assert [r["id"] for r in records] == ["PI-0001", "PI-0002"]
    first = records[0]
    assert first["org"] == "Example Cloud" and first["source_url"] == "https://example.com/pm/lock-service"
    assert first["title"] == "Storage nodes drop out after a power loss" and first["date"] == "2019-06-13"
    assert first["summary"].startswith("Storage nodes lost power") and "de-registration overloaded" in first["body"]
    dumped = json.dumps(records)
    assert "zebrafinch" not in dumped and "cascading-failure" not in dumped and "categories" not in dumped
    assert labels == [{"id": "PI-0001", "labels": ["cascading-failure", "hardware"]}]  # no label, no row


def test_converted_collection_imports_and_prune_drops_rejected_records(converter: ModuleType, tmp_path: Path) -> None:
    source = tmp_path / "data"
    source.mkdir()
    (source / "a.md").write_text(POSTMORTEM, encoding="utf-8")
    (source / "b.md").write_text(UNLABELLED, encoding="utf-8")
    (source / "c.md").write_text(POSTMORTEM.replace("uuid: 11111111-0000-0000-0000-000000000001", "uuid: x"), encoding="utf-8")
    records, labels = converter.convert(source)
    collection, labels_path = tmp_path / "collection.jsonl", tmp_path / "labels.jsonl"
    collection.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    labels_path.write_text("".join(json.dumps(r) + "\n" for r in labels), encoding="utf-8")
    report = run_import(collection, tmp_path / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="PI"))
    assert sorted(a.id for a in report.accepted) == ["PI-0001", "PI-0002"]  # the third is the first again: same URL
    assert converter.prune(labels_path, tmp_path / "lib") == (1, 1)
    kept = [json.loads(line) for line in labels_path.read_text(encoding="utf-8").splitlines()]
    assert kept == [{"id": "PI-0001", "labels": ["cascading-failure", "hardware"]}]


def test_bad_front_matter_names_the_file(converter: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(converter.ConversionError, match=r"x\.md: does not start"):
        converter.split_front_matter("no front matter", "x.md")
    with pytest.raises(converter.ConversionError, match="not closed"):
        converter.split_front_matter("---\ntitle: a\n", "y.md")
