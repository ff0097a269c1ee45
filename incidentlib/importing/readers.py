"""Read foreign incident collections into plain records.

Every record keeps where it came from (``file:line`` or ``file#index``) so reports
can point at it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from ..errors import ReadError


class ImportFormat(str, Enum):
    yaml = "yaml"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    markdown = "markdown"


#: One source record as read: field names to whatever the format held (strings, lists, nested mappings).
RecordData = dict[str, Any]


@dataclass
class RawRecord:
    """A record before mapping: where it came from, its fields, and what the reader derived."""

    location: str
    data: RecordData
    heading: str | None = None  # the Markdown heading above an entry, which becomes a tag


def read_records(path: Path, fmt: ImportFormat) -> list[RawRecord]:
    if path.is_dir():
        raise ReadError(f"{path}: a directory, not a file to import")
    if not path.is_file():
        raise ReadError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (spreadsheets write one) is not part of the first field
    except UnicodeDecodeError as exc:
        where = raw.count(b"\n", 0, exc.start) + 1  # the line of the first byte that is not UTF-8
        raise ReadError(f"{path.name}:{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                        "convert the file to UTF-8 first") from None
    name = path.name
    if fmt is ImportFormat.markdown:
        return read_markdown_list(text, name)
    if fmt is ImportFormat.jsonl:
        records = []
        # only a newline ends a record: str.splitlines() would also cut at U+2028 or a form feed, which JSON strings
        # may hold unescaped (ticket exports do), and report a valid line as broken JSON
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReadError(f"{name}:{number}: not valid JSON: {exc.msg}") from None
            if not isinstance(value, dict):
                raise ReadError(f"{name}:{number}: expected a JSON object per line")
            records.append(RawRecord(f"{name}:{number}", value))
        return records
    if fmt is ImportFormat.csv:
        return read_csv(text, name)
    try:
        value = yaml.safe_load(text) if fmt is ImportFormat.yaml else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ReadError(f"{name}: not valid {fmt.value.upper()}: {exc}") from None
    items = _find_list(value)
    if items is None:
        raise ReadError(f"{name}: expected a list of records, or a mapping holding one")
    return [RawRecord(f"{name}#{index}", item) for index, item in enumerate(items) if isinstance(item, dict)]


#: Field separators a CSV file may use, tried on its header line: spreadsheets in locales whose decimal mark is a comma
#: save with ";", and ticket tools export tab-separated values.
CSV_DELIMITERS = ",;\t"


def read_csv(text: str, name: str) -> list[RawRecord]:
    """Records of a CSV file with a header row; each is located at the line it starts on.  A quoted field may span
    lines (a ticket's description usually does) and keeps its line breaks; a quote left open is an error naming its
    line rather than the rest of the file read into one field.  The separator is the one of :data:`CSV_DELIMITERS`
    found most often in the header line, outside quotes (a comma when none is)."""
    header = next((line for line in text.split("\n") if line.strip()), "")
    unquoted = re.sub(r'"[^"]*"', "", header)
    delimiter = max(CSV_DELIMITERS, key=unquoted.count) if any(d in unquoted for d in CSV_DELIMITERS) else ","
    # Python's default limit (128 KiB a field) is less than a long postmortem in one cell
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))
    read: list[tuple[int, str]] = []  # the lines the reader took since the last record: (number, text)

    def lines() -> Iterator[str]:
        for number, line in enumerate(io.StringIO(text, newline=""), 1):
            read.append((number, line))
            yield line

    reader = csv.DictReader(lines(), delimiter=delimiter, strict=True)
    records = []
    try:
        if not reader.fieldnames:
            raise ReadError(f"{name}: CSV has no header row")
        read.clear()
        for row in reader:
            start = next((number for number, line in read if line.strip()), reader.line_num)
            read.clear()
            records.append(RawRecord(f"{name}:{start}", {k: _lines(v) for k, v in row.items() if k is not None}))
    except csv.Error as exc:
        opened = next((number for number, line in read if line.strip()), reader.line_num)
        why = "a quoted field opened here is never closed" if "end of data" in str(exc) else str(exc)
        raise ReadError(f"{name}:{opened}: not valid CSV: {why}") from None
    return records


def _lines(value: str | None) -> str | None:
    """A CSV cell with its line breaks as ``\\n`` (a file saved on Windows breaks the lines of a quoted cell with
    ``\\r\\n``)."""
    return value.replace("\r\n", "\n").replace("\r", "\n") if isinstance(value, str) else value


def _find_list(value: object) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list) and v and all(isinstance(i, dict) for i in v)]
        if len(lists) == 1:
            return lists[0]
        return [value]  # a single record
    return None


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_ENTRY = re.compile(r"^\s*(?:[-*+]\s+)?\[(?P<org>[^\]]+)\]\((?P<url>[^)\s]+)\)\.?\s*(?P<blurb>.*)$")
# An entry that lost its link: "[Org]. blurb" or a list item "- Org. blurb" / "- Org: blurb".
_LINKLESS = re.compile(r"^\s*(?:\[(?P<org>[^\]]+)\](?!\()|[-*+]\s+(?!\[)(?P<item>[^.:]{1,80})[.:](?=\s|$))\.?\s*(?P<blurb>.*)$")


def read_markdown_list(text: str, name: str) -> list[RawRecord]:
    """The common "[Org](url). One-paragraph blurb." list, grouped under headings.

    The nearest heading above an entry becomes its ``tag``; continuation lines join
    the blurb until a blank line.
    """
    records: list[RawRecord] = []
    heading: str | None = None
    current: RawRecord | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            current = None
            continue
        match = _HEADING.match(stripped)
        if match:
            heading = match.group(2).strip()
            current = None
            continue
        entry = _ENTRY.match(line)
        if entry:
            current = RawRecord(
                f"{name}:{number}",
                {"org": entry.group("org").strip(), "url": entry.group("url").strip(),
                 "summary": entry.group("blurb").strip()},
                heading or None,
            )
            records.append(current)
        elif current is None and (linkless := _LINKLESS.match(line)):
            # kept as a record without a URL, so the import reports it as rejected instead of dropping it
            org = (linkless.group("org") or linkless.group("item") or "").strip()
            current = RawRecord(f"{name}:{number}", {"org": org, "summary": linkless.group("blurb").strip()},
                                heading or None)
            records.append(current)
        elif current is not None:
            current.data["summary"] = f"{current.data['summary']} {stripped}".strip()
    return records
