"""eval/cloud_incident_reports.py: the labelled cloud incident reports of a public study -> an importable collection
and a separate labels file; the report's markup is read as text and no annotation column enters a record."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import eval_script

from incidentlib.importing import ImportFormat, ImportOptions, run_import

COMMIT = "0123abc"
AZURE_HTML = (
    '<div class="col-sm-11 incident-history-item">\n<button type="button">\n<span class="hide-text">10/19/2020</span>\n'
    '<div class="col-md-8 incident-history-title">\n      RCA - Example Manager - Issues reaching resources\n  </div>\n'
    '<div class="col-md-3 incident-history-tracking-id">\n  Tracking ID: ZLXD-HT8\n  </div>\n</button>\n'
    '<div class="card-body">\n<p><strong>Summary of Impact:</strong> Between 19:07 and 22:20 UTC requests failed.'
    '<br/><br/><strong>Root Cause:</strong> A deployment sent every call to one partition &amp; it throttled.</p>'
    '<ul><li>Add auto-scaling</li><li>Review the rollout</li></ul></div></div>')
GCP_UPDATES = (
    "[{'affected_locations': array([{'id': 'europe-west4', 'title': 'Netherlands (europe-west4)'}],\n"
    "       dtype=object), 'created': '2022-09-28T06:07:52+00:00', 'status': 'AVAILABLE', "
    "'text': \"The issue has been resolved. We're sorry.\"}, "
    "{'affected_locations': None, 'created': '2022-09-27T20:01:00+00:00', 'status': 'SERVICE_OUTAGE', "
    "'text': 'We are investigating elevated errors.\\r\\nNext update soon.'}]")
ANNOTATIONS = {"label_user_symptom": "ANNOTATED wombat symptom", "label_root_cause": "ANNOTATED quokka cause",
               "label_start_time": "20201019T19:07:00", "label_location": "Narnia", "label_service_category": "compute",
               "label_user_symptom_category": "ERROR, UNVAIL"}


def _converter() -> ModuleType:
    return eval_script("cloud_incident_reports")


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _study(folder: Path) -> Path:
    folder.mkdir()
    _write(folder / "azure_label.csv", [
        {"": "", "description": AZURE_HTML, "vendor": "Azure", **ANNOTATIONS, "label_root_cause_category": "DEPLOY"},
        {"": "", "description": AZURE_HTML.replace("ZLXD-HT8", "AAAA-BBB"), "vendor": "Azure", **ANNOTATIONS,
         "label_root_cause_category": "UNKNOWN"}])
    _write(folder / "gcp_label.csv", [
        {"": "7", "service": "Google BigQuery", "description": GCP_UPDATES,
         "external_description": "We are experiencing an issue with Google BigQuery.", "vendor": "GCP", **ANNOTATIONS,
         "label_root_cause_category": "config, Overload"},
        {"": "8", "service": "Google BigQuery", "description": "", "external_description": "Not captured",
         "vendor": "GCP", **ANNOTATIONS, "label_root_cause_category": "DEPLOY"}])
    _write(folder / "aws_label.csv", [
        {"": "612", "service": "Amazon CloudWatch (Ireland)", "status": "[RESOLVED] Delayed CloudWatch Metrics",
         "description": '<div><span class="yellowfg">11:55 AM PST</span>&nbsp;We can confirm delays.</div>',
         "vendor": "AWS", **ANNOTATIONS, "label_root_cause_category": ""}])
    return folder


def test_records_hold_the_report_as_text_and_no_annotation(tmp_path: Path) -> None:
    records, labels = _converter().convert(_study(tmp_path / "labels"), COMMIT)
    assert [r["id"] for r in records] == ["CR-0001", "CR-0002"]  # UNKNOWN, a missing report and AWS's blank: left out
    azure, gcp = records
    assert azure["title"] == "RCA - Example Manager - Issues reaching resources" and azure["date"] == "2020-10-19"
    assert azure["org"] == "Microsoft Azure"
    assert azure["source_url"] == ("https://github.com/atlarge-research/llm-cloud-incident-extraction/blob/0123abc/"
                                   "data/4_label_data/azure_label.csv#row-1")
    assert azure["body"] == ("Summary of Impact: Between 19:07 and 22:20 UTC requests failed.\n\nRoot Cause: A "
                             "deployment sent every call to one partition & it throttled.\n\nAdd auto-scaling\n"
                             "Review the rollout")
    assert gcp["title"] == "We are experiencing an issue with Google BigQuery." and gcp["date"] == "2022-09-27"
    assert gcp["body"] == ("We are investigating elevated errors.\nNext update soon.\n\nThe issue has been resolved. "
                           "We're sorry.")  # oldest update first
    text = json.dumps(records)
    for leak in ("wombat", "quokka", "Narnia", "DEPLOY", "compute", "CONFIG", "<div", "&amp;"):
        assert leak not in text, leak
    assert labels == [{"id": "CR-0001", "labels": ["DEPLOY"]}, {"id": "CR-0002", "labels": ["CONFIG", "OVERLOAD"]}]


def test_another_annotation_as_the_label_reads_every_provider(tmp_path: Path) -> None:
    records, labels = _converter().convert(_study(tmp_path / "labels"), COMMIT, label="symptom")
    assert len(records) == 4 and records[-1]["title"] == "Delayed CloudWatch Metrics"
    assert records[-1]["body"] == "11:55 AM PST We can confirm delays."
    assert all(row["labels"] == ["ERROR", "UNAVIL"] for row in labels)  # the misspelling read as meant


def test_the_collection_imports(tmp_path: Path) -> None:
    records, _ = _converter().convert(_study(tmp_path / "labels"), COMMIT)
    source = tmp_path / "collection.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = run_import(source, tmp_path / "lib", ImportOptions(format=ImportFormat.jsonl, id_prefix="CR"))
    assert len(report.accepted) == 2 and not report.rejected


def test_a_folder_without_the_files_or_a_broken_update_is_an_error_naming_it(tmp_path: Path) -> None:
    converter = _converter()
    with pytest.raises(converter.ConversionError, match=r"none of azure_label\.csv"):
        converter.convert(tmp_path, COMMIT)
    folder = tmp_path / "broken"
    folder.mkdir()
    _write(folder / "gcp_label.csv", [{"description": "[{'created': '2022-01-01', 'text': 'unclosed}]",
                                       "external_description": "", "label_root_cause_category": "DEPLOY"}])
    with pytest.raises(converter.ConversionError, match=r"no row has both a report and a label_root_cause_category"):
        converter.convert(folder, COMMIT)
    _write(folder / "gcp_label.csv", [{"description": "[{'created': '2022-01-01', 'text': 'bad \\x escape'}]",
                                       "external_description": "", "label_root_cause_category": "DEPLOY"}])
    with pytest.raises(converter.ConversionError, match=r"gcp_label\.csv row 1: an update's text is not a string"):
        converter.convert(folder, COMMIT)
