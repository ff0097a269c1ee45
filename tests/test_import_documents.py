"""A postmortem archive kept as documents, one incident per file, imported from a folder or one file at a time
(incidentlib/importing/documents.py): front matter, the title heading, dates from file names, HTML read as text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from incidentlib.cli import app
from incidentlib.importing import ImportFailed, ImportFormat, ImportOptions, run_import
from incidentlib.loader import check_library

NCCL = """---
severity: sev2
date: 2024-03-02
services: [training]
---
# Training job hung on a flapping IB link

The 512-GPU pretraining job stopped making progress at step 4200.

## Root cause
A flapping InfiniBand link on gpu-17 stalled the all-reduce.
"""
DRIVER = ("<html><head><title>Tab name</title></head><body><h1>Driver upgrade broke inference</h1>"
          "<p>After the driver upgrade, <b>Xid 79</b> appeared on two hosts &amp; p99 latency tripled.</p>"
          "<ul><li>Rolled back</li><li>Pinned the driver</li></ul></body></html>")
DISK = "Checkpoint writes failing\n===\n\ntorch.save raised OSError: [Errno 28] No space left on device.\n"


def archive(root: Path) -> Path:
    (root / "2023").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "2024-03-02-nccl-hang.md").write_text(NCCL, encoding="utf-8")
    (root / "2023" / "20231105_driver.html").write_text(DRIVER, encoding="utf-8")
    (root / "disk.txt").write_text(DISK, encoding="utf-8")
    (root / "README.md").write_text("# Postmortems of Acme\n\nOne file per incident.\n", encoding="utf-8")
    (root / "_template.md").write_text("# Title\n\n## Impact\n\n## Root cause\n", encoding="utf-8")
    (root / "2023" / "_index.md").write_text("# 2023\n", encoding="utf-8")
    (root / ".git" / "notes.md").write_text("# not an incident\n", encoding="utf-8")
    (root / "diagram.png").write_bytes(b"\x89PNG\r\n")
    (root / "2024-13-45-notes.txt").write_text("Notes on the capacity review\n", encoding="utf-8")
    return root


def test_a_folder_of_postmortems_imports_one_record_per_document(tmp_path: Path) -> None:
    target = tmp_path / "lib"
    result = CliRunner().invoke(app, [
        "import", str(archive(tmp_path / "pm")), "--into", str(target), "--json", "--set", "org=Acme",
        "--set", "source_url=https://git.example/acme/postmortems/blob/main/{file}"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["format"] == "document"  # a folder is read as documents without --format
    assert [row["location"] for row in report["accepted"]] == [
        "pm/2023/20231105_driver.html", "pm/2024-03-02-nccl-hang.md", "pm/2024-13-45-notes.txt",
        "pm/disk.txt"]  # no README, template or index, nothing hidden
    assert report["unread_columns"] == ["services"]
    data, problems = check_library(target)
    assert not problems and data is not None
    driver, nccl, notes, disk = (data.incidents[row["id"]] for row in report["accepted"])
    assert notes.date is None  # 2024-13-45: digits, not a date
    assert nccl.title.get("en") == "Training job hung on a flapping IB link"
    assert str(nccl.date) == "2024-03-02" and nccl.severity is not None and nccl.severity.value == "sev2"
    assert nccl.body.get("en").startswith("The 512-GPU pretraining job")  # the title heading left the body
    assert "## Root cause\nA flapping InfiniBand link" in nccl.body.get("en")
    assert str(nccl.sources[0].url) == "https://git.example/acme/postmortems/blob/main/2024-03-02-nccl-hang.md"
    assert driver.title.get("en") == "Driver upgrade broke inference"  # the page's <h1>, not the tab's <title>
    assert str(driver.date) == "2023-11-05"  # from the file's name
    assert driver.body.get("en") == ("After the driver upgrade, Xid 79 appeared on two hosts & p99 latency tripled."
                                     "\n\nRolled back\nPinned the driver")
    assert str(driver.sources[0].url).endswith("/blob/main/2023/20231105_driver.html")
    assert disk.title.get("en") == "Checkpoint writes failing" and disk.date is None
    assert disk.summary.get("en") == "torch.save raised OSError: [Errno 28] No space left on device."


def test_one_document_is_one_record_and_a_markdown_file_is_still_a_list_by_default(tmp_path: Path) -> None:
    source = tmp_path / "2024-03-02-nccl-hang.md"
    source.write_text(NCCL.replace("date: 2024-03-02\n", ""), encoding="utf-8")
    options = ImportOptions(format=ImportFormat.document, sets=["org=Acme", "source_url=https://wiki.example/{file}"])
    report = run_import(source, tmp_path / "lib", options)
    assert [row.location for row in report.accepted] == ["2024-03-02-nccl-hang.md"]
    data, _ = check_library(tmp_path / "lib")
    assert data is not None and str(data.incidents[report.accepted[0].id].date) == "2024-03-02"
    as_list = CliRunner().invoke(app, ["import", str(source), "--into", str(tmp_path / "other"), "--dry-run"])
    said = " ".join(as_list.output.split())
    assert as_list.exit_code != 0 and "no records found as markdown" in said
    assert "(one postmortem of its own is --format document)" in said


@pytest.mark.parametrize(("text", "message"), [
    ("---\ntitle: never closed\n\n# Heading\n", r"bad\.md:1: front matter opened with '---' is never closed"),
    ("---\n- a\n- list\n---\n# Heading\n", r"bad\.md:2: front matter must be a mapping of fields, got list"),
    ("---\ntitle: [unclosed\n---\n", r"bad\.md: front matter is not valid YAML"),
])
def test_broken_front_matter_is_an_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    folder = tmp_path / "pm"
    folder.mkdir()
    (folder / "fine.md").write_text("# Fine\n\nText.\n", encoding="utf-8")
    (folder / "bad.md").write_text(text, encoding="utf-8")
    with pytest.raises(ImportFailed, match=message):
        run_import(folder, tmp_path / "lib", ImportOptions(format=ImportFormat.document, sets=["org=Acme"]))
    assert not (tmp_path / "lib").exists()


def test_a_folder_without_documents_or_read_as_another_format_is_refused_saying_why(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "README.md").write_text("# About\n", encoding="utf-8")
    with pytest.raises(ImportFailed, match=r"empty: no documents \(\.md, .*\) in the folder or its subfolders"):
        run_import(empty, tmp_path / "lib", ImportOptions(format=ImportFormat.document))
    with pytest.raises(ImportFailed, match=r"a folder; a folder of postmortems, one per file, is read with --format "
                                           r"document"):
        run_import(empty, tmp_path / "lib", ImportOptions(format=ImportFormat.csv))
