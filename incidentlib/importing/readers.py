"""Read foreign incident collections into plain records.

Every record keeps where it came from (``file:line`` or ``file#index``) so reports
can point at it.
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from ..errors import ReadError
from .documents import DOCUMENT_SUFFIXES, document_files, read_document


class ImportFormat(str, Enum):
    yaml = "yaml"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    markdown = "markdown"
    document = "document"  # one incident per file; a folder of them (:mod:`.documents`)


#: One source record as read: field names to whatever the format held (strings, lists, nested mappings).
RecordData = dict[str, Any]


@dataclass
class RawRecord:
    """A record before mapping: where it came from, its fields, and what the reader derived."""

    location: str
    data: RecordData
    heading: str | None = None  # the Markdown heading above an entry, which becomes a tag


def read_utf8(path: Path, purpose: str = "to import") -> str:
    """The text of a file a user gives, or a :class:`ReadError` that names the file and the line of the first byte
    that is not UTF-8.  A byte-order mark (spreadsheets write one) is not part of the first field."""
    if path.is_dir():
        raise ReadError(f"{path}: a directory, not a file {purpose}")
    if not path.is_file():
        raise ReadError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = raw.count(b"\n", 0, exc.start) + 1
        raise ReadError(f"{path.name}:{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                        "convert the file to UTF-8 first") from None


def json_lines(text: str, name: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of JSON Lines ``text`` parsed, with its line number; :class:`ReadError` naming ``name`` and
    the line for one that is not JSON.  Only a newline ends a line: ``str.splitlines()`` would also cut at U+2028 or a
    form feed, which JSON strings may hold unescaped (ticket exports do), and report a valid line as broken JSON."""
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReadError(f"{name}:{number}: not valid JSON: {exc.msg}") from None


#: What each format reads a record from, for the error of a file in which none was found.
_RECORD_SHAPES = {
    ImportFormat.yaml: "a list of mappings",
    ImportFormat.json: "a list of objects",
    ImportFormat.jsonl: "one JSON object per line",
    ImportFormat.csv: "a row under the header",
    ImportFormat.markdown: "a list item with a link (- [title](url))",
    ImportFormat.document: "a document of its own",
}


def read_records(path: Path, fmt: ImportFormat) -> list[RawRecord]:
    """The records of ``path`` read as ``fmt``; a file in which none is found is an error (an import of nothing
    would look like an import that worked)."""
    records = _read_records(path, fmt)
    if not records:
        one = " (one postmortem of its own is --format document)" if fmt is ImportFormat.markdown else ""
        raise ReadError(f"{path.name}: no records found as {fmt.value} ({_RECORD_SHAPES[fmt]}); "
                        f"is the file empty, or is --format wrong?{one}")
    return records


def _read_records(path: Path, fmt: ImportFormat) -> list[RawRecord]:
    if fmt is ImportFormat.document:
        return _read_documents(path)
    if path.is_dir():
        raise ReadError(f"{path}: a folder; a folder of postmortems, one per file, is read with --format document")
    text = read_utf8(path)
    name = path.name
    if fmt is ImportFormat.markdown:
        return read_markdown_list(text, name)
    if fmt is ImportFormat.jsonl:
        records = []
        for number, value in json_lines(text, name):
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


def _read_documents(path: Path) -> list[RawRecord]:
    """Each document of a folder (or the one file given) as a record, located by its path."""
    if not path.is_dir():
        return [RawRecord(path.name, read_document(path, read_utf8(path), path.name, path.name))]
    files = document_files(path)
    if not files:
        raise ReadError(f"{path}: no documents ({', '.join(DOCUMENT_SUFFIXES)}) in the folder or its subfolders")
    records = []
    for file in files:
        relative = file.relative_to(path).as_posix()
        location = f"{path.name}/{relative}"
        records.append(RawRecord(location, read_document(file, read_utf8(file), location, relative)))
    return records


#: Field separators a CSV file may use: spreadsheets in locales whose decimal mark is a comma save with ";", and
#: ticket tools export tab-separated values.
CSV_DELIMITERS = (",", ";", "\t")
#: Records read to choose the separator: enough to see that rows split like the header, few enough to cost nothing.
SNIFF_RECORDS = 20
#: Held while a read has the csv module's field size limit (a setting of the whole process) raised.
_FIELD_LIMIT_LOCK = threading.Lock()
#: Excel's first line naming the separator (``sep=;``), which is not part of the data.
_EXCEL_SEPARATOR = re.compile(r"^sep=(.)\r?$")


def read_csv(text: str, name: str) -> list[RawRecord]:
    """Records of a CSV file with a header row; each is located at the line it starts on.  A quoted field may span
    lines (a ticket's description usually does) and keeps its line breaks; a quote left open is an error naming the
    line of its record rather than the rest of the file read into that record.  A stray quote inside a field is read
    as a character.  Blank lines, and rows whose every cell is blank, are skipped."""
    numbered = list(enumerate(io.StringIO(text, newline=""), 1))
    while numbered and not numbered[0][1].strip():  # blank lines before the header
        numbered.pop(0)
    declared = _EXCEL_SEPARATOR.match(numbered[0][1]) if numbered else None
    if declared:
        numbered.pop(0)
    delimiter = declared.group(1) if declared else _separator([line for _, line in numbered])
    read: list[tuple[int, str]] = []  # the lines the reader took since the last record: (number, text)

    def lines() -> Iterator[str]:
        for number, line in numbered:
            read.append((number, line))
            yield line

    # Python's default limit (128 KiB a field) is less than a long postmortem in one cell.  The limit is the csv
    # module's, for every thread: two reads raising and restoring it at once (a server's imports) could leave it raised
    # for good, so one read at a time changes it
    _FIELD_LIMIT_LOCK.acquire()
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text)))
    try:
        reader = csv.reader(lines(), delimiter=delimiter)
        header = next((row for row in reader if row), None)
        if not header:
            raise ReadError(f"{name}: CSV has no header row")
        repeated = {column for column in header if header.count(column) > 1}
        records, last = [], read[:0]
        read.clear()
        for row in reader:
            last = read[:]
            read.clear()
            if not any(cell.strip() for cell in row):
                continue
            start = next((number for number, line in last if line.strip()), reader.line_num)
            records.append(RawRecord(f"{name}:{start}", _cells(header, row, repeated)))
        if last and _left_open("".join(line for _, line in last), delimiter):
            start = next(number for number, line in last if line.strip())
            raise ReadError(f"{name}:{start}: not valid CSV: a quoted field of the record on this line is never closed "
                            "(it would take in the rest of the file)")
    except csv.Error as exc:
        raise ReadError(f"{name}:{reader.line_num}: not valid CSV: {exc}") from None
    finally:
        csv.field_size_limit(limit)
        _FIELD_LIMIT_LOCK.release()
    return records


def _separator(lines: list[str]) -> str:
    """The one of :data:`CSV_DELIMITERS` that splits the first :data:`SNIFF_RECORDS` records into as many fields as
    the header, most often (a header alone can mislead: a question used as a column name holds commas or
    semicolons); ties go to the one giving the header more fields, then to the comma."""
    sample = "".join(lines[:SNIFF_RECORDS * 4])

    def fit(delimiter: str) -> tuple[float, int]:
        rows = [row for row in csv.reader(io.StringIO(sample, newline=""), delimiter=delimiter) if row]
        if not rows or len(rows[0]) < 2:
            return (-1.0, 0)
        width = len(rows[0])
        body = rows[1:SNIFF_RECORDS + 1]
        agreeing = sum(len(row) == width for row in body) / len(body) if body else 1.0
        return (agreeing, width)

    return max(CSV_DELIMITERS, key=fit)  # max keeps the first of equals: the comma


def _left_open(record: str, delimiter: str) -> bool:
    """Whether a record's text ends inside a quoted field: read leniently, such a field runs to the end of the file."""
    try:
        list(csv.reader(io.StringIO(record, newline=""), delimiter=delimiter, strict=True))
    except csv.Error as exc:
        return "end of data" in str(exc)
    return False


def _cells(header: list[str], row: list[str], repeated: set[str]) -> RecordData:
    """A row as ``{column: cell}``; a column the header repeats (Jira writes ``Labels,Labels,Labels``) holds the list
    of its non-empty cells.  Cells past the header's last column are dropped, as cells of no column."""
    data: RecordData = {}
    for column, cell in zip(header, row, strict=False):  # a row may be shorter or longer than the header
        value = _lines(cell)
        if column in repeated:
            data.setdefault(column, [])
            if value and value.strip():
                data[column].append(value)
        else:
            data[column] = value
    for column in header[len(row):]:  # a short row: its missing cells are empty
        data.setdefault(column, [] if column in repeated else None)
    return data


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
        if not lists and any(isinstance(v, list) for v in value.values()) \
                and not any(isinstance(v, str | int | float) for v in value.values()):
            # no value of its own, only an empty list: a wrapper with no records ({"page": {…}, "incidents": []})
            return []
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
    # lines end at a line break only (str.splitlines() also cuts at U+2028 and form feeds, which text may hold)
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
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
