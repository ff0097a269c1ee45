"""Field mappings: say where each incidentlib field lives in a foreign record.

``--map title=headline --map source_url=links[0].href --map tags=meta.labels[].name``

A source path is dot-separated keys; ``[N]`` picks a list item and ``[]`` collects a
field from every item of a list.  Targets ending in ``.en`` or ``.ko`` set that
language; a bare text target (``title``) uses the import's ``--lang``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import MappingError

TEXT_FIELDS = ("title", "summary", "body", "detection", "mitigation")
LIST_FIELDS = ("tags", "components", "causes", "symptoms", "signals", "source_url")
SCALAR_FIELDS = ("id", "org", "date", "severity", "source_title", "source_publisher", "source_kind", "status")
TARGETS = (
    *SCALAR_FIELDS,
    *LIST_FIELDS,
    *TEXT_FIELDS,
    *(f"{f}.{lang}" for f in TEXT_FIELDS for lang in ("en", "ko")),
)

# Where to look when no mapping is given, in order.
DEFAULT_SOURCES: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "org": ("org", "organization", "company", "provider", "vendor"),
    "date": ("date", "started_at", "start_date", "incident_date", "when", "created_at", "created", "opened_at"),
    "severity": ("severity",),
    "status": ("status",),
    "title": ("title", "name", "headline"),
    "summary": ("summary", "description", "blurb", "abstract"),
    # a description is the body when a summary column holds the summary (Jira's Summary and Description)
    "body": ("body", "details", "narrative", "text", "content", "description"),
    "detection": ("detection",),
    "mitigation": ("mitigation", "resolution"),
    "tags": ("tags", "labels", "categories", "category"),
    "components": ("components",),
    "causes": ("causes", "root_cause", "cause"),
    "symptoms": ("symptoms", "impact"),
    "signals": ("signals", "errors", "error_messages"),
    "source_url": ("source_url", "url", "link", "postmortem_url", "sources"),
    "source_title": ("source_title",),
    "source_publisher": ("source_publisher", "publisher"),
}

_STEP = re.compile(r"^(?P<key>[^\[\]]+)?(?P<index>\[(\d*)\])*$")


@dataclass(frozen=True)
class FieldMap:
    target: str
    source: str

    @classmethod
    def parse(cls, option: str) -> FieldMap:
        target, source = _field_option("--map", option, "FIELD=SOURCE, e.g. title=headline or source_url=links[0].href")
        if not _is_path(source):
            raise MappingError(f"--map {option!r}: cannot read source path {source!r} (use a.b[0].c or a[].b)")
        return cls(target, source)


def _field_option(flag: str, option: str, form: str) -> tuple[str, str]:
    """``FIELD`` and what follows ``=`` of a ``--map``/``--set`` option; :class:`MappingError` naming the option."""
    target, sep, value = option.partition("=")
    target, value = target.strip(), value.strip()
    if not sep or not target or not value:
        raise MappingError(f"{flag} {option!r}: write {form}")
    if target not in TARGETS:
        raise MappingError(f"{flag} {option!r}: unknown field {target!r}; fields are: {', '.join(TARGETS)}")
    return target, value


def _is_path(path: str) -> bool:
    return all(step and _STEP.match(step) for step in path.split("."))


#: A ``{path}`` placeholder of a ``--set`` value, filled from the record.
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


@dataclass(frozen=True)
class FieldSet:
    """``--set FIELD=VALUE``: one value for every record of a file (an organization the export does not name), or a
    template whose ``{path}`` placeholders are filled from each record (a ticket's URL from its number)."""

    target: str
    template: str

    @classmethod
    def parse(cls, option: str) -> FieldSet:
        target, template = _field_option("--set", option,
                                         "FIELD=VALUE, e.g. org=Acme or source_url=https://tickets.example/browse/{key}")
        for path in _PLACEHOLDER.findall(template):
            if not _is_path(path):
                raise MappingError(f"--set {option!r}: cannot read {{{path}}} as a source path (use {{a.b[0].c}})")
        return cls(target, template)

    def fill(self, record: dict[str, Any]) -> tuple[str | None, str | None]:
        """The value for ``record``, or None and the problem (a placeholder that found nothing there)."""
        missing: list[str] = []

        def value(match: re.Match[str]) -> str:
            found = get_path(record, match.group(1))
            if found is _MISSING or found in NO_VALUE or isinstance(found, (list, dict)):
                missing.append(match.group(1))
                return ""
            return str(found).strip()

        filled = _PLACEHOLDER.sub(value, self.template)
        if missing:
            return None, f"{self.target}: --set found nothing at {missing[0]!r}"
        return filled, None


_MISSING = object()


def get_path(record: object, path: str) -> object:
    """The value at ``path`` in ``record``, or ``_MISSING``; ``[]`` gathers over a list."""
    values = [record]
    gathered = False
    for step in path.split("."):
        key, indexes = _split_step(step)
        next_values = []
        for value in values:
            if key is not None:
                if not isinstance(value, dict) or key not in value:
                    continue
                value = value[key]
            items = [value]
            for index in indexes:
                expanded = []
                for item in items:
                    if not isinstance(item, list):
                        continue
                    if index is None:
                        expanded.extend(item)
                        gathered = True
                    elif -len(item) <= index < len(item):
                        expanded.append(item[index])
                items = expanded
            next_values.extend(items)
        values = next_values
    if not values:
        return _MISSING
    return values if gathered else values[0]


def _split_step(step: str) -> tuple[str | None, list[int | None]]:
    key = step.split("[", 1)[0] or None
    indexes = [int(raw) if raw else None for raw in re.findall(r"\[(\d*)\]", step)]
    return key, indexes


def placeholders(template: str) -> list[str]:
    """The source paths of a ``--set`` template's ``{path}`` placeholders."""
    return list(_PLACEHOLDER.findall(template))


def source_key(path: str) -> str | None:
    """The record key a source path starts from (``links`` of ``links[0].href``); None for a path that starts with an
    index (``[0].name``: a list at the top)."""
    return _split_step(path.split(".", 1)[0])[0]


#: Values a default source key is passed over for, as if the record did not have it.
NO_VALUE: tuple[object, ...] = (None, "", [])


class _Defaults:
    """The keys of a record that targets no mapping gives are taken from: a target's common names
    (:data:`DEFAULT_SOURCES`) in any case (exports capitalise their columns: "Summary", "Description"), a column
    mapped to one field never taken for another.  A column a ``--set`` template of a text field quotes is held back
    the same way (``--set "body={description} (from Jira)"``: the description is not the summary too); one that a
    template of another field quotes still gives its own field: ``--set source_url=https://t.example/{id}`` quotes
    the id in a link, and the record keeps that id."""

    def __init__(self, record: dict[str, Any], maps: Sequence[FieldMap], sets: Sequence[FieldSet] = ()) -> None:
        self.record = record
        self.mapped = {m.source for m in maps} | {
            path for m in sets if m.target.split(".", 1)[0] in TEXT_FIELDS for path in placeholders(m.template)}
        self.by_lower: dict[str, str] = {}
        for key in record:
            if key not in self.mapped:
                self.by_lower.setdefault(str(key).lower(), key)

    def taken(self, explicit: Collection[str], only: Collection[str] | None = None) -> dict[str, str]:
        """The key each target (of ``only``, or every one) takes its value from when ``explicit`` (the targets
        ``--map``/``--set`` give) does not give it, whole or in part (``title.ko`` given: nothing from ``title``)."""
        found: dict[str, str] = {}
        for target in DEFAULT_SOURCES:
            if (only is not None and target not in only) or target in explicit \
                    or any(t.startswith(f"{target}.") for t in explicit):
                continue
            key = self.key(target)
            if key is not None:
                found[target] = key
        if "summary" in found and found["summary"] == found.get("body"):
            # one column (a lone "description") is the body; the summary is then made from its first sentences, not
            # a second copy of the whole text
            del found["summary"]
        return found

    def key(self, target: str) -> str | None:
        for candidate in DEFAULT_SOURCES.get(target, ()):
            found = candidate if candidate in self.record and candidate not in self.mapped else self.by_lower.get(candidate)
            if found is not None and self.record[found] not in NO_VALUE:
                return found
        return None


def default_source(record: dict[str, Any], target: str, maps: Sequence[FieldMap] = (),
                   sets: Sequence[FieldSet] = ()) -> str | None:
    """The key of ``record`` a target's value is taken from when no mapping gives it (as :func:`extract` takes it)."""
    return _Defaults(record, maps, sets).key(target)


def unread_keys(record: dict[str, Any], maps: Sequence[FieldMap], sets: Sequence[FieldSet] = ()) -> list[str]:
    """The keys of ``record`` with a value that no field is taken from: not the first step of a mapping's path or of
    a ``--set`` placeholder, and not the key a default gives a target (:func:`extract`).  An import reports them:
    a column nothing maps (``service``, ``priority``) is dropped, and the user should know before it is."""
    read = {_split_step(path.split(".", 1)[0])[0] for path in (*(m.source for m in maps),
                                                                 *(p for m in sets for p in _PLACEHOLDER.findall(m.template)))}
    explicit = {m.target for m in maps} | {m.target for m in sets}
    read |= set(_Defaults(record, maps, sets).taken(explicit).values())
    return [str(key) for key, value in record.items() if key not in read and value not in (*NO_VALUE, {})]


def unread_layout(record: dict[str, Any]) -> tuple[tuple[object, int], ...]:
    """All that :func:`unread_keys` reads of ``record`` for given mappings: its keys in order, and for each whether
    its value is passed over by a default (:data:`NO_VALUE`: 0), an empty object (1) or a value (2).  Records of the same
    layout have the same unread keys, and an export's records are mostly laid out alike."""
    return tuple((key, 0 if value in NO_VALUE else 1 if value == {} else 2) for key, value in record.items())


def extract(record: dict[str, Any], maps: list[FieldMap], only: Collection[str] | None = None,
            sets: Sequence[FieldSet] = ()) -> tuple[dict[str, object], list[str]]:
    """Values for every target (or the targets ``only``): ``--set`` values and explicit mappings first, then the
    default keys.

    Returns the values and a list of problems (explicit mappings and placeholders that found nothing).
    """
    given: list[FieldMap | FieldSet] = [*maps, *sets]
    explicit = {m.target: m for m in given if only is None or m.target in only}
    values: dict[str, object] = {}
    problems: list[str] = []
    for field_set in sets:
        if field_set.target in explicit:
            filled, problem = field_set.fill(record)
            if problem:
                problems.append(problem)
            else:
                values[field_set.target] = filled
    for target, field_map in explicit.items():
        if isinstance(field_map, FieldSet):
            continue
        value = get_path(record, field_map.source)
        if value is _MISSING:
            problems.append(f"{target}: nothing at {field_map.source!r}")
        else:
            values[target] = value
    for target, key in _Defaults(record, maps, sets).taken(explicit, only).items():
        values[target] = record[key]
    return values, problems
