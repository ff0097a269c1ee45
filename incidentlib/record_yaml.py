"""An incident document as YAML that reads like the file it replaces, so a change is a small ``git diff``.

The write store keeps each record as canonical JSON (keys sorted, for its ETag), and ``yaml.safe_dump`` of that
rewrote a whole file for a one-field edit: keys in alphabetical order, flow lists made block lists, quotes added
and removed, every paragraph of the narrative folded into one quoted scalar, defaults written out.

:func:`incident_yaml` keeps the file it replaces (``like``) line for line wherever a top-level field is unchanged.
An incident file is a block mapping whose fields start in the first column, so each field is a run of lines: a
field whose value changed gets its run written anew (a list of plain values written on one line stays on one
line; a day stays an unquoted YAML date), a field gone from the document loses its run, a new field is added after
the others.  Comments before the first field and the comments and blank lines after a field stay where they are,
whatever became of the field; the file's line endings (``\\r\\n`` or ``\\n``) are kept.  A top-level field the
file leaves out is not written when it holds the model's default (``status: published``), since loading fills it
in again.  The result is read back and must load as the document; a file laid out otherwise (flow style at the
top, a document marker, anchors and aliases, which a rewritten field could break) is written whole instead.  New
text is written in the model's field order, text with line breaks as literal blocks (``|``), as the library's
files write narratives, folded at ``LINE_WIDTH``.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import yaml

from .models import Incident

#: Where long plain text is folded: the width the tagger's writes use, so files keep one style.
LINE_WIDTH = 100
#: The first line of a top-level field of a block mapping: a plain key in the first column, then a colon.
_FIELD_LINE = re.compile(r"^([A-Za-z_][\w-]*):(?:\s|$)")
#: A day as ISO 8601 writes it; only a full day is written as a YAML date (a month or year stays text).
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: A character that can start an anchor or an alias; only then is the text scanned for them.
_ANCHOR_OR_ALIAS = re.compile(r"[&*]")


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing text with line breaks as literal blocks."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # a literal block cannot keep trailing spaces on a line or control characters: such text stays quoted
    literal = "\n" in value and value.replace("\n", "").isprintable() and all(
        line == line.rstrip() for line in value.split("\n"))
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if literal else None)


_Dumper.add_representer(str, _text)


def _dump(document: dict[str, Any], flow_lists: bool = False) -> str:
    """YAML of ``document``; with ``flow_lists``, a list of plain values on one line (``tags: [a, b]``)."""
    return yaml.dump(document, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=LINE_WIDTH,
                     default_flow_style=None if flow_lists else False)


def _runs(text: str) -> tuple[str, dict[str, tuple[str, str]]] | None:
    """The lines before the first field (comments), and each top-level field's lines split into its value and the
    comment and blank lines after it (which belong to what follows); None when the text is not laid out as one
    block mapping of plain keys, or names anchors or aliases (a kept line could name an anchor a rewritten one held).
    """
    if _ANCHOR_OR_ALIAS.search(text) and any(isinstance(token, (yaml.AnchorToken, yaml.AliasToken))
                                              for token in yaml.scan(text)):
        return None
    head: list[str] = []
    runs: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        match = _FIELD_LINE.match(line)
        if match:
            if match.group(1) in runs:
                return None
            current = runs[match.group(1)] = [line]
        elif current is None:
            if line.strip() and not line.lstrip().startswith("#"):
                return None  # a document marker, or content before the first field
            head.append(line)
        elif line[:1] not in (" ", "\t", "#", "-", "\n", "\r") and line.strip():
            return None  # something else in the first column: not a field of this mapping
        else:
            current.append(line)
    split: dict[str, tuple[str, str]] = {}
    for key, lines in runs.items():
        cut = len(lines)
        while cut > 1 and (not lines[cut - 1].strip() or lines[cut - 1].startswith("#")):
            cut -= 1  # blank lines and comments in the first column after the value
        split[key] = ("".join(lines[:cut]), "".join(lines[cut:]))
    return "".join(head), split


def as_stored(value: Any) -> Any:
    """A loaded YAML value as the store keeps it (dates as ISO text)."""
    if isinstance(value, dict):
        return {str(key): as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _ordered(document: dict[str, Any]) -> dict[str, Any]:
    rank = {name: i for i, name in enumerate(Incident.model_fields)}
    return {key: document[key] for key in sorted(document, key=lambda key: rank.get(key, len(rank)))}


def incident_yaml(document: dict[str, Any], like: str | None = None) -> str:
    """``document`` as YAML in the layout of ``like`` (the text of the file it replaces): see the module docstring."""
    try:
        previous = as_stored(yaml.safe_load(like)) if like else None
    except yaml.YAMLError:
        previous = None
    layout = _runs(like) if like and isinstance(previous, dict) else None
    if previous is None or layout is None or set(layout[1]) != set(previous):
        return _dump(_ordered(document))
    head, runs = layout
    newline = "\r\n" if "\r\n" in (like or "") else "\n"
    defaults = {name: getattr(field.default, "value", field.default)
                for name, field in Incident.model_fields.items() if not field.is_required()}
    document = {key: value for key, value in document.items()
                if key in previous or key not in defaults or defaults[key] != as_stored(value)}
    parts = [head]
    for key, (value, after) in runs.items():
        if key in document and previous[key] == as_stored(document[key]):
            parts.append(value if value.endswith("\n") else value + newline)
        elif key in document:
            written = _dump({key: _as_date(key, document[key])}, flow_lists=value.startswith(f"{key}: ["))
            parts.append(written.replace("\n", newline))
        parts.append(after)  # the comments and blank lines after a field stay, whatever became of it
    added = {key: _as_date(key, value) for key, value in _ordered(document).items() if key not in runs}
    if added:
        if parts[-1] and not parts[-1].endswith("\n"):
            parts.append(newline)
        parts.append(_dump(added).replace("\n", newline))
    text = "".join(parts)
    try:
        same = as_stored(yaml.safe_load(text)) == as_stored(document)
    except yaml.YAMLError:
        same = False
    return text if same else _dump(_ordered(document))


def _as_date(key: str, value: Any) -> Any:
    """The incident's ``date`` written as YAML writes a day (unquoted ``2024-06-25``), as the library's files do."""
    if key == "date" and isinstance(value, str) and _ISO_DAY.fullmatch(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return value
    return value
