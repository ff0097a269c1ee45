"""Incident YAML written in the layout of the file it replaces (incidentlib/record_yaml.py)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

from incidentlib.record_yaml import incident_yaml

DATA = Path(__file__).resolve().parent.parent / "data" / "incidents"


def _as_stored(text: str) -> dict:
    """A file's document as the write store keeps it: canonical JSON, keys sorted, the default status written."""
    document = json.loads(json.dumps(yaml.safe_load(text), sort_keys=True, default=str))
    return {"status": "published", **document}


def _changes(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_every_bundled_file_is_written_back_byte_for_byte_when_nothing_changed() -> None:
    files = sorted(DATA.glob("*.yaml"))
    assert len(files) > 300
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert incident_yaml(_as_stored(text), like=text) == text, path.name


def test_a_changed_field_is_rewritten_alone_in_the_style_of_its_lines() -> None:
    text = (DATA / "IL-0001.yaml").read_text(encoding="utf-8")
    document = _as_stored(text)
    document["tags"] = [*document["tags"], "postmortem"]  # a flow list stays a flow list
    document["severity"] = "sev2"  # a new field goes after the others
    del document["symptoms"]  # a removed field leaves the file
    written = incident_yaml(document, like=text)
    changes = _changes(text, written)
    assert changes[0].startswith("-tags: [") and changes[1].startswith("+tags: [") and changes[1].endswith(", postmortem]")
    assert "+severity: sev2" in changes and any(line.startswith("-symptoms: [") for line in changes)
    assert len(changes) == 4
    assert json.loads(json.dumps(yaml.safe_load(written), default=str)) == {k: v for k, v in document.items() if k != "status"}


def test_a_new_file_is_in_field_order_with_narratives_as_literal_blocks() -> None:
    document = {"title": {"en": "Checkpoint stalls"}, "org": "meta", "id": "IL-0999", "status": "draft",
                "body": {"en": "First paragraph.\n\nSecond paragraph.\n"}}
    written = incident_yaml(document)
    assert written.splitlines()[0] == "id: IL-0999" and "status: draft" in written
    assert "  en: |\n    First paragraph.\n\n    Second paragraph.\n" in written
    assert yaml.safe_load(written) == document


def test_a_file_laid_out_otherwise_is_written_whole_and_still_loads_as_the_document() -> None:
    text = "---\nid: IL-0999\norg: meta\ntitle: {en: Old}\n"  # a document marker before the fields
    document = {"id": "IL-0999", "org": "meta", "title": {"en": "New"}}
    written = incident_yaml(document, like=text)
    assert yaml.safe_load(written) == document and not written.startswith("---")


def test_comments_line_endings_and_days_survive_a_change() -> None:
    text = ("# Source: internal postmortem, reviewed\n"
            "id: IL-0999\norg: meta  # owner\n\n# TODO: confirm the title\n"
            "date: 2024-06-25\ntitle: {en: Old}\n")
    document = {"id": "IL-0999", "org": "acme", "date": "2024-06-26", "title": {"en": "Old"}}
    written = incident_yaml(document, like=text)
    assert written.startswith("# Source: internal postmortem, reviewed\nid: IL-0999\norg: acme\n\n# TODO: confirm")
    assert "date: 2024-06-26\n" in written  # a day stays a YAML date, not quoted text
    assert yaml.safe_load(written)["date"].isoformat() == "2024-06-26"
    windows = text.replace("\n", "\r\n")
    written = incident_yaml(document, like=windows)
    assert "\n" not in written.replace("\r\n", "")  # no bare line feed among the file's CRLF
    assert "org: acme\r\n\r\n# TODO: confirm the title\r\n" in written


def test_anchors_are_never_left_dangling() -> None:
    """A kept line naming an anchor that a rewritten field held would not load: such a file is written whole."""
    text = "id: IL-0999\norg: meta\ntitle: &t {en: Old}\nsummary: *t\n"
    document = {"id": "IL-0999", "org": "meta", "title": {"en": "New"}, "summary": {"en": "Old"}}
    written = incident_yaml(document, like=text)
    assert yaml.safe_load(written) == document
