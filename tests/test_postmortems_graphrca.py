"""eval/postmortems_graphrca.py: the GraphRCA study's incident folders -> an importable collection and a separate
labels file; the category (in the labels file only), the lines stating it and the annotations never enter a record."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import eval_script

from incidentlib.importing import ImportFormat, ImportOptions, run_import


def _converter() -> ModuleType:
    return eval_script("postmortems_graphrca")


def _incident(root: Path, number: int, postmortem: str, company: str, date: str, category: str, source: str) -> None:
    folder = root / f"incident_{number:03d}"
    folder.mkdir(parents=True)
    (folder / "postmortem.md").write_text(postmortem, encoding="utf-8")
    (folder / "metadata.json").write_text(json.dumps({"company": company, "category": f"{category}/Other", "date": date}))
    (folder / "ground_truth.json").write_text(json.dumps({
        "source": source, "category": category, "root_cause": "ANNOTATED zebrafinch sentence"}))
    (folder / "logs.txt").write_text("2020-01-01 SYNTHETIC quokka log line\n", encoding="utf-8")


def _study(root: Path) -> Path:
    _incident(root, 1, "# Example Cloud Incident\n\n**Category:** Database\n**Severity:** High\n"
                       "**Source:** https://example.com/pm/1\n\n## Description\n\nThe primary database ran out of "
                       "connections during a failover.\n", "Example Cloud", "2021-03-04", "Database", "https://example.com/pm/1")
    _incident(root, 2, "# Example Mail outage\nRoot Cause: An expired TLS certificate.\nCategory: Security/Certs\n"
                       "Source: https://example.com/pm/2\nImpact: mail could not be sent.\n",
              "Example Mail", "Unknown", "Security", "https://example.com/pm/2")
    _incident(root, 3, "# Example Cloud again\n\nThe same write-up under another folder.\n",
              "Example Cloud", "2021-03-04", "Network", "https://example.com/pm/1")
    return root


def test_records_hold_the_write_up_without_what_states_the_label(tmp_path: Path) -> None:
    records, labels = _converter().convert(_study(tmp_path / "real_incidents"))
    assert [r["id"] for r in records] == ["PG-0001", "PG-0002", "PG-0003"]
    first, second = records[0], records[1]
    assert first["title"] == "Example Cloud Incident" and first["org"] == "Example Cloud"
    assert first["date"] == "2021-03-04" and first["source_url"] == "https://example.com/pm/1"
    assert "ran out of connections" in str(first["body"]) and "## Description" in str(first["body"])
    assert "date" not in second  # "Unknown" is not a date
    assert "Root Cause: An expired TLS certificate." in str(second["body"]) and "Impact: mail" in str(second["body"])
    text = json.dumps(records)
    for leak in ("Category", "Severity", "Source:", "Database", "Security", "zebrafinch", "quokka"):
        assert leak not in text, leak
    assert labels == [{"id": "PG-0001", "labels": ["Database"]}, {"id": "PG-0002", "labels": ["Security"]},
                      {"id": "PG-0003", "labels": ["Network"]}]


def test_the_collection_imports_and_a_repeated_source_is_rejected(tmp_path: Path) -> None:
    records, _ = _converter().convert(_study(tmp_path / "real_incidents"))
    source = tmp_path / "collection.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = run_import(source, tmp_path / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="PG"))
    assert len(report.accepted) == 2 and len(report.rejected) == 1
    assert "same source URL" in str(report.rejected[0])


def test_a_folder_without_incidents_is_an_error_naming_it(tmp_path: Path) -> None:
    converter = _converter()
    with pytest.raises(converter.ConversionError, match="no incident_"):
        converter.convert(tmp_path)
    broken = tmp_path / "incident_001"
    broken.mkdir()
    (broken / "metadata.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(converter.ConversionError, match=r"metadata\.json"):
        converter.convert(tmp_path)
