"""Labels files for `eval similar`: what a user's own export may look like, and the errors for what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from incidentlib.errors import LabelError
from incidentlib.similar_eval import evaluate, load_labels

RECORDS = {f"SP-000{i}": object() for i in range(1, 5)}


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


def test_a_string_is_one_label_and_numbers_are_labels(tmp_path: Path) -> None:
    spec = write(tmp_path, "l.jsonl", '{"id": "SP-0001", "labels": "cert"}\n{"id": "SP-0002", "label": "dns"}\n'
                                      '{"id": "SP-0003", "labels": [7, "dns"]}\n')
    assert load_labels(spec, RECORDS) == {"SP-0001": {"cert"}, "SP-0002": {"dns"}, "SP-0003": {"7", "dns"}}


def test_a_spreadsheet_csv_with_a_byte_order_mark_and_crlf_is_read(tmp_path: Path) -> None:
    spec = write(tmp_path, "l.csv", "\ufeffid,label\r\nSP-0001,dns\r\nSP-0001,config\r\nSP-0002,dns\r\n")
    assert load_labels(spec, RECORDS) == {"SP-0001": {"dns", "config"}, "SP-0002": {"dns"}}


@pytest.mark.parametrize(("name", "content", "message"), [
    ("l.jsonl", '[1, 2]\n', r"l\.jsonl:1: needs an object with 'id'"),
    ("l.jsonl", '{"id": "SP-0001", "labels": []}\n', r"l\.jsonl:1: 'labels' must be a non-empty list"),
    ("l.jsonl", '{"id": "SP-0001", "labels": [{"x": 1}]}\n', r"l\.jsonl:1: 'labels' must be a non-empty list"),
    ("l.jsonl", '{"id": "SP-0001", "labels": ["a"]}\n{"id": \n', r"--labels: l\.jsonl:2: not valid JSON"),
    ("l.jsonl", b'x\n{"id": "SP-0001", "label": "caf\xe9"}\n', r"--labels: l\.jsonl:2: not UTF-8 text"),
    ("l.csv", "incident,category\nSP-0001,dns\n", r"l\.csv:1: needs 'id' and 'label' columns, found incident, category"),
    ("l.csv", "id,label\nSP-0001,\n", r"l\.csv:2: an empty 'id' or 'label'"),
])
def test_what_cannot_be_read_is_named_with_its_line(tmp_path: Path, name: str, content: str | bytes, message: str) -> None:
    with pytest.raises(LabelError, match=message):
        load_labels(write(tmp_path, name, content), RECORDS)


def test_a_directory_is_not_a_labels_file(tmp_path: Path) -> None:
    with pytest.raises(LabelError, match="a directory, not a file of labels"):
        load_labels(str(tmp_path), RECORDS)


def test_nothing_to_measure_and_a_depth_past_the_candidates_are_errors() -> None:
    def any_order(query: str, candidates: list[str]) -> list[str]:
        return candidates

    apart = {"A": {"x"}, "B": {"y"}, "C": {"z"}}
    with pytest.raises(LabelError, match=r"3 labelled record.* no two share a label"):
        evaluate("toy", "causes", apart, {"bm25": any_order}, k=1)
    shared = {"A": {"x"}, "B": {"x"}, "C": {"z"}}
    with pytest.raises(LabelError, match="--k 3: more than the 2 candidate"):
        evaluate("toy", "causes", shared, {"bm25": any_order}, k=3)
    assert evaluate("toy", "causes", shared, {"bm25": any_order}, k=2).queries == 2


def test_an_export_s_own_ticket_keys_find_the_records_its_import_stored(tmp_path: Path) -> None:
    from incidentlib.models import padded_incident_id

    assert padded_incident_id("OPS-87") == "OPS-0087" and padded_incident_id("IL-000123") == "IL-000123"
    assert padded_incident_id("OPS-0") is None and padded_incident_id("ops87") is None
    spec = write(tmp_path, "l.jsonl", '{"id": "SP-1", "labels": ["dns"]}\n{"id": "sp-2", "label": "dns"}\n'
                                      '{"id": "SP-0001", "label": "cert"}\n')
    assert load_labels(spec, RECORDS) == {"SP-0001": {"dns", "cert"}, "SP-0002": {"dns"}}
    with pytest.raises(LabelError, match="ids not in the library: SP-9"):
        load_labels(write(tmp_path, "m.jsonl", '{"id": "SP-9", "label": "dns"}\n'), RECORDS)


def test_a_short_ticket_key_names_the_stored_record(data_dir: Path) -> None:
    from incidentlib import IncidentNotFound, Library

    library = Library.open(data_dir)
    assert library.get(" il-25 ").id == "IL-0025" and library.get("IL-0025").id == "IL-0025"
    with pytest.raises(IncidentNotFound):
        library.get("IL-99999")
