"""An incident document as YAML that reads like the file it replaces, so a change is a small ``git diff``.

The write store keeps each record as canonical JSON (keys sorted, for its ETag), and ``yaml.safe_dump`` of that
rewrote a whole file for a one-field edit: keys in alphabetical order, flow lists made block lists, quotes added
and removed, every paragraph of the narrative folded into one quoted scalar, defaults written out.

:func:`incident_yaml` keeps the file it replaces (``like``) line for line wherever a top-level field is unchanged.
An incident file is a block mapping whose fields start in the first column, so each field is a run of lines: a
field whose value changed gets its run written anew (a list written on one line stays on one line), a field gone from the document loses its run, a new field
is added after the others.  A top-level field the file leaves out is not written when it holds the model's
default (``status: published``), since loading fills it in again.  The result is read back and must load as the
document; if the file was laid out otherwise (flow style at the top, a document marker, anchors), it is written
whole instead.  New text is written in the model's field order, text with line breaks as literal blocks (``|``),
as the library's files write narratives, folded at ``LINE_WIDTH``.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from .models import Incident

#: Where long plain text is folded: the width the tagger's writes use, so files keep one style.
LINE_WIDTH = 100
#: The first line of a top-level field of a block mapping: a plain key in the first column, then a colon.
_FIELD_LINE = re.compile(r"^([A-Za-z_][\w-]*):(?:\s|$)")


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


def _runs(text: str) -> dict[str, str] | None:
    """Each top-level field's lines (comments and blank lines go with the field before them); None when the text
    is not laid out as one block mapping of plain keys."""
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
        elif line[:1] not in (" ", "\t", "#", "-", "\n", "\r") and line.strip():
            return None  # something else in the first column: not a field of this mapping
        else:
            current.append(line)
    return {key: "".join(lines) for key, lines in runs.items()}


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
    previous = as_stored(yaml.safe_load(like)) if like else None
    runs = _runs(like) if like and isinstance(previous, dict) else None
    if previous is None or runs is None or set(runs) != set(previous):
        return _dump(_ordered(document))
    defaults = {name: getattr(field.default, "value", field.default)
                for name, field in Incident.model_fields.items() if not field.is_required()}
    document = {key: value for key, value in document.items()
                if key in previous or key not in defaults or defaults[key] != as_stored(value)}
    parts = []
    for key, run in runs.items():
        if key not in document:
            continue
        if previous[key] == as_stored(document[key]):
            parts.append(run if run.endswith("\n") else run + "\n")
        else:
            blank = run[len(run.rstrip("\n")) + 1:] if run.endswith("\n\n") else ""  # the blank lines after it stay
            parts.append(_dump({key: document[key]}, flow_lists=run.startswith(f"{key}: [")) + blank)
    added = {key: value for key, value in _ordered(document).items() if key not in runs}
    if added:
        parts.append(_dump(added))
    text = "".join(parts)
    return text if as_stored(yaml.safe_load(text)) == as_stored(document) else _dump(_ordered(document))
