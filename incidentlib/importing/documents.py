"""A postmortem archive kept as documents: one incident per file (Markdown, text or HTML), a folder of them.

Teams keep their write-ups as files in a repository or a wiki export: ``postmortems/2024-03-02-nccl-hang.md``, often
opening with YAML front matter (``date``, ``severity``, ``services``) between ``---`` lines.  Each file is one record:

- the front matter's fields, as any format's fields (``--map`` reads them; ``title``, ``date``, ``org``, ``url``…
  are taken by name);
- ``title``: the front matter's, else the document's first line when it is a top heading (``# NCCL hang``, or a line
  underlined with ``===``; an HTML document's ``<h1>`` or ``<title>``), which then leaves the body;
- ``body``: the rest of the document (HTML is read as text by the importer, :mod:`.markup`);
- ``date``: the front matter's, else a date the file's name starts with (``2024-03-02-…``, ``20240302_…``);
- ``file``: the file's path inside the folder, for a template (``--set source_url=https://git.example/pm/{file}``).

A folder is read through its subfolders in name order; hidden files and folders, ``README`` and ``index`` files and
the template a team copies (``template.md``, :data:`NOT_RECORDS`) are not records.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ReadError
from .markup import html_text, looks_like_html

#: The files of a folder read as documents.
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt", ".text", ".html", ".htm")
#: Files of a folder that describe the folder or are the form every write-up starts from, not an incident (by their
#: name without its suffix, in any case, a leading ``_`` aside: Hugo's ``_index.md``).
NOT_RECORDS = ("readme", "index", "template", "postmortem-template", "incident-template", "changelog", "license",
               "contributing")
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)\s*$")
_ATX_TITLE = re.compile(r"^#\s+(.+?)\s*#*\s*$")
_SETEXT_RULE = re.compile(r"^=+\s*$")
_HTML_HEADING = re.compile(r"<h1\b[^>]*>(.*?)</h1\s*>", re.IGNORECASE | re.DOTALL)
_HTML_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_NAME_DATE = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})(?:\D|$)")


def document_files(folder: Path) -> list[Path]:
    """The documents of ``folder`` and its subfolders, in path order (module docstring)."""
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if path.suffix.lower() in DOCUMENT_SUFFIXES and path.stem.lower().lstrip("_") not in NOT_RECORDS:
            found.append(path)
    return found


def _plain(value: Any) -> Any:
    """Front-matter values as the other formats give them: YAML's dates as ISO text, lists and mappings within."""
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _front_matter(lines: list[str], location: str) -> tuple[dict[str, Any], int]:
    """The fields of YAML front matter opening ``lines`` and the index of the first line after it."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    for end in range(1, len(lines)):
        if _FRONT_MATTER_END.match(lines[end]):
            break
    else:
        raise ReadError(f"{location}:1: front matter opened with '---' is never closed")
    try:
        value = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise ReadError(f"{location}: front matter is not valid YAML: {exc}") from None
    if value is None:
        return {}, end + 1
    if not isinstance(value, dict):
        raise ReadError(f"{location}:2: front matter must be a mapping of fields, got {type(value).__name__}")
    return {str(key): _plain(item) for key, item in value.items()}, end + 1


def _title_and_body(text: str) -> tuple[str | None, str]:
    """The document's own title (its first line, when a top heading) and the text left as its body."""
    if looks_like_html(text):
        if (heading := _HTML_HEADING.search(text)) and (title := html_text(heading.group(1))):
            return title, (text[:heading.start()] + text[heading.end():]).strip()  # the page's heading is its title
        named = _HTML_TITLE.search(text)  # the browser tab's name: not shown on the page, so nothing to take out
        return (html_text(named.group(1)) or None) if named else None, text.strip()
    lines = text.strip("\n").split("\n")
    first = lines[0].strip() if lines else ""
    if atx := _ATX_TITLE.match(first):
        return atx.group(1).strip(), "\n".join(lines[1:]).strip()
    if first and len(lines) > 1 and _SETEXT_RULE.match(lines[1].strip()):
        return first, "\n".join(lines[2:]).strip()
    return None, text.strip()


def read_document(path: Path, text: str, location: str, file: str) -> dict[str, Any]:
    """One document's record fields (module docstring)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    fields, start = _front_matter(lines, location)
    title, body = _title_and_body("\n".join(lines[start:]))
    record = dict(fields)
    if title and not record.get("title"):
        record["title"] = title
    if body and not record.get("body"):
        record["body"] = body
    if not record.get("date") and (dated := _NAME_DATE.match(path.name)):
        year, month, day = dated.groups()
        with contextlib.suppress(ValueError):  # 2024-13-45-notes.md: digits, not a date
            record["date"] = dt.date(int(year), int(month), int(day)).isoformat()
    record.setdefault("file", file)
    return record
