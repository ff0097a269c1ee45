"""Request rules, defined once: limits, enums, filters and the field -> concept-kind mapping.

The CLI options, the FastAPI parameters and the MCP tool schemas are all derived from
these definitions (see :func:`with_filter_params`), so a limit or a filter changes here only.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, model_validator

from .errors import FilterError, InvalidRequest, QueryError
from .models import CONCEPT_FIELDS, INFERRED_KINDS, LANGS, ConceptKind, Lang, Severity, Status

#: Results per search or similar call: beyond this, rankings are noise and responses get large.
MAX_K = 100
#: Results per MCP search/similar call: an agent's context window is the scarce resource.
MAX_AGENT_K = 50
#: Longest query or pasted text: a screenful of log lines; longer text dilutes BM25 and the embedder.
MAX_QUERY_CHARS = 2000
#: Longest text given to ``similar``: a whole postmortem write-up, about twice the longest record text of the bundled
#: library (10,405 characters).  ``similar`` does not dilute: the text is a weighted term vector and its passages are
#: matched one by one.  Cut at MAX_QUERY_CHARS, the bundled records' texts (median 4,286 characters) lost half of
#: their evidence (docs/search.md, "The whole write-up as the query").
MAX_SIMILAR_TEXT_CHARS = 20_000
#: Longest page of a listing over HTTP or the CLI (the library is a few hundred incidents).
MAX_LIMIT = 500
#: Longest page of a listing over MCP (keeps tool answers readable for an agent).
MAX_AGENT_LIMIT = 200
#: Passages in a RAG context: more than this rarely fits a prompt.
MAX_RAG_K = 20
#: Candidates in a diagnosis: past 20 the scores are too small to mean anything.
MAX_DIAGNOSE_LIMIT = 20
#: Points in one metric series: a day of per-batch MFU fits; more should be downsampled first.
MAX_SERIES_POINTS = 200_000
#: Bytes of CSV/JSON series text (about 40 bytes a row at MAX_SERIES_POINTS rows, with room for extra columns).
MAX_SERIES_BYTES = 16_000_000
#: Bytes of one record's file given to ``incidentlib add`` or saved from ``edit``: what a server takes in one request
#: body by default (:data:`.api.guards.DEFAULT_MAX_BODY_BYTES` is this), so a record filed locally could be sent to a
#: server as it is.  The largest bundled record is 18 KB of YAML; a file far larger is a wrong file or a pasted export.
MAX_RECORD_BYTES = 256 * 1024
#: Largest import collection accepted over HTTP (characters); bigger collections go through the CLI.
MAX_IMPORT_CHARS = 5_000_000
#: Its body in bytes: 4 bytes per character is the UTF-8 worst case (JSON escapes of control
#: characters aside), which keeps a full-size Korean collection inside the limit.
MAX_IMPORT_BYTES = 4 * MAX_IMPORT_CHARS
#: The formats an import reads (``incidentlib.importing.ImportFormat``'s values, tests/test_import.py), for the
#: adapters that offer them: a request body's field is typed with it, the web page lists ``IMPORT_FORMATS``.
ImportFormatName = Literal["csv", "json", "jsonl", "yaml", "markdown", "document"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormatName)
#: The format a file's suffix names, for an import that does not name one (a .jsonl file read as CSV took its first
#: record for a header and rejected everything with reasons that did not say why).
FORMAT_BY_SUFFIX = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".yaml": "yaml",
                    ".yml": "yaml", ".md": "markdown", ".markdown": "markdown", ".html": "document",
                    ".htm": "document"}


def file_suffix(fmt: str) -> str:
    """The suffix a file of text given in ``fmt`` is saved under for the importer to read (a paste, an HTTP body):
    Markdown's for a list or one document, else the format's name (``.jsonl``)."""
    return ".md" if fmt in ("markdown", "document") else f".{fmt}"


def format_of_name(name: str) -> str | None:
    """The import format a file's name ends in (``incidents.CSV`` is csv), or None when its suffix names none.  A
    ``.md`` file is a Markdown *list* of postmortems; one postmortem of its own is ``document``, named as such, but
    for a web page (``.html``), which is one document or nothing the importer reads."""
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return FORMAT_BY_SUFFIX.get(f".{suffix}") if suffix else None
#: Alerts diagnosed per webhook call: Alertmanager groups a few dozen at most by default.
# Longest lifetime of an API token: ten years is "does not expire" for any real deployment, and
# keeps the expiry date representable (a date past year 9999 cannot be stored).
MAX_TOKEN_DAYS = 3650
MAX_ALERTS = 50
#: A generic alert's fields whose text is diagnosed (besides its labels and annotations): annotations of these names
#: and top-level strings of these names or ``text``.
ALERT_TEXT_FIELDS = ("summary", "description", "message", "log", "log_line", "logline", "error", "output")
#: Top-level strings a generic alert may name itself with (they become its ``alertname`` label).
ALERT_NAME_FIELDS = ("title", "name", "alertname")
#: Symptoms named in one diagnosis request.
MAX_SYMPTOMS = 20
#: Hops in a neighbourhood walk: at 3 hops the graph is most of the library.
MAX_DEPTH = 3
#: Plausible incident years (the records start in the 2000s; the bounds catch typos).
MIN_YEAR, MAX_YEAR = 1900, 2100
#: Longest incident id, concept reference or cluster id accepted in a path parameter.
MAX_ID_CHARS = 32
MAX_REF_CHARS = 200
#: Longest SPARQL query: generous for hand-written queries, small enough to refuse pasted dumps.
MAX_SPARQL_CHARS = 20_000


#: Concept kinds by name, as parameters spell them (the values of :class:`ConceptKind`).
ConceptKindName = Literal["component", "cause", "symptom", "tag", "organization"]
#: Search modes (values of ``incidentlib.search.engine.SearchMode``).
SearchModeName = Literal["hybrid", "lexical", "dense"]
#: Root-cause clustering methods (values of ``incidentlib.analysis.ClusterMethod``).
ClusterMethodName = Literal["graph", "embedding"]
#: The kinds listed as topics (organizations have their own listing).
TopicKind = Literal["component", "cause", "symptom", "tag"]
assert set(get_args(ConceptKindName)) == {k.value for k in ConceptKind}


#: The filter that widens the component, cause and symptom filters to inferred links (see :data:`FILTER_PARAMS`).
INFERRED_FILTER = "inferred"


@dataclass(frozen=True)
class FilterParam:
    """One filter: its parameter name, type, help text and (for concept filters) vocabulary kind."""

    name: str
    type: Any
    help: str
    kind: ConceptKind | None = None
    incident_field: str | None = None
    ge: int | None = None
    le: int | None = None


FILTER_PARAMS: tuple[FilterParam, ...] = (
    FilterParam("org", str, "Organization id or name, e.g. 'aws' or 'Cloudflare'.", ConceptKind.organization, "org"),
    FilterParam("component", str, "Component id or label, e.g. 'nccl' or 'InfiniBand'; narrower concepts match too.",
                ConceptKind.component, "components"),
    FilterParam("cause", str, "Cause id or label, e.g. 'configuration-change'.", ConceptKind.cause, "causes"),
    FilterParam("symptom", str, "Symptom id or label, e.g. 'collective-timeout'.", ConceptKind.symptom, "symptoms"),
    FilterParam("tag", str, "Tag id or label, e.g. 'ai-infra', 'cloud', 'cdn'.", ConceptKind.tag, "tags"),
    FilterParam("year_from", int, "Only incidents from this year on.", ge=MIN_YEAR, le=MAX_YEAR),
    FilterParam("year_to", int, "Only incidents up to this year.", ge=MIN_YEAR, le=MAX_YEAR),
    FilterParam("severity", Severity, "Only this severity (sev1 is the worst)."),
    FilterParam("status", Status, "Only records in this review state: 'published' leaves out drafts awaiting "
                "review (imported or filed, not yet checked by a curator); 'draft' keeps only them."),
    FilterParam(INFERRED_FILTER, bool, "The component, cause and symptom filters also match concepts inferred from a "
                "record's text and not yet reviewed (an imported archive has no curated links until reviewed). "
                "Off: they match curated links only."),
)
CONCEPT_FILTERS: tuple[FilterParam, ...] = tuple(p for p in FILTER_PARAMS if p.kind is not None)
#: The concept filters ``inferred`` widens: those of the kinds a record's text is tagged with.
INFERABLE_FILTERS: tuple[str, ...] = tuple(p.name for p in CONCEPT_FILTERS if p.kind in INFERRED_KINDS)
assert all(CONCEPT_FIELDS[p.incident_field] is p.kind for p in CONCEPT_FILTERS if p.incident_field)


#: The filters :class:`IncidentFilter`'s one rule across fields is about (``year_from`` not after ``year_to``).
YEAR_RANGE = ("year_from", "year_to")


class CrossFieldError(ValueError):
    """A rule across fields of a model: the problem is about each of ``fields`` (an HTTP 422 names every one)."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class IncidentFilter(BaseModel):
    """Narrow a listing or a search. Concept filters also match narrower concepts."""

    model_config = ConfigDict(extra="forbid")

    org: str | None = None
    component: str | None = None
    cause: str | None = None
    symptom: str | None = None
    tag: str | None = None
    # strict: a JSON body's "2024" or true is not a year (a query string's "2024" is made an int before this)
    year_from: StrictInt | None = Field(default=None, ge=MIN_YEAR, le=MAX_YEAR)
    year_to: StrictInt | None = Field(default=None, ge=MIN_YEAR, le=MAX_YEAR)
    severity: Severity | None = None
    status: Status | None = None
    inferred: StrictBool | None = None

    @model_validator(mode="after")
    def _years_in_order(self) -> IncidentFilter:
        if self.year_from is not None and self.year_to is not None and self.year_from > self.year_to:
            raise CrossFieldError(f"year_from {self.year_from} is later than year_to {self.year_to}: "
                                  "no incident can match", fields=YEAR_RANGE)
        return self

    def is_empty(self) -> bool:
        """True when no filter narrows anything (``inferred`` alone widens the concept filters, of which there are none)."""
        return all(value is None for name, value in self.model_dump().items() if name != INFERRED_FILTER)

    @property
    def with_inferred(self) -> bool:
        """Whether the concept filters also match inferred links still proposed."""
        return bool(self.inferred)

    @property
    def names_inferable_concept(self) -> bool:
        """Whether a filter that ``inferred`` widens is set (:data:`INFERABLE_FILTERS`)."""
        return any(getattr(self, name) for name in INFERABLE_FILTERS)

    @classmethod
    def of(cls, **values: Any) -> IncidentFilter:
        """Build from adapter parameters; a bad value is a :class:`FilterError` naming the parameter."""
        try:
            return cls(**values)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            # a field's problem names the field; a rule across fields (the years' order) says both in its message
            reasons = "; ".join((f"{'.'.join(str(p) for p in e['loc'])}: " if e["loc"] else "") + e["msg"].removeprefix("Value error, ")
                                for e in errors)
            named = [str(e["loc"][0]) for e in errors if e["loc"]]
            if named:
                raise FilterError(reasons, parameter=named[0]) from None
            fields = next((c.fields for e in errors if isinstance(c := e.get("ctx", {}).get("error"), CrossFieldError)), YEAR_RANGE)
            raise FilterError(reasons, parameter=fields[0], others=fields[1:]) from None


assert {p.name for p in FILTER_PARAMS} == set(IncidentFilter.model_fields)


def alert_payload_schema() -> dict[str, Any]:
    """What an alert payload needs, as JSON Schema: an Alertmanager webhook's ``alerts``, or a generic alert with
    labels, annotations, a name or a text (the rule :func:`incidentlib.analysis.alerts.normalise` applies)."""
    text = {"type": "string", "pattern": r"\S"}
    return {"type": "object", "anyOf": [
        {"required": ["alerts"], "properties": {"alerts": {"type": "array", "minItems": 1, "maxItems": MAX_ALERTS}}},
        {"required": ["labels"], "properties": {"labels": {"type": "object", "minProperties": 1}}},
        {"required": ["annotations"], "properties": {"annotations": {"type": "object", "minProperties": 1}}},
        *({"required": [name], "properties": {name: text}} for name in (*ALERT_NAME_FIELDS, *ALERT_TEXT_FIELDS, "text")),
    ]}


def check_lang(lang: str) -> str:
    """``lang`` if it is one of :data:`LANGS`, else :class:`InvalidRequest`."""
    if lang not in LANGS:
        raise InvalidRequest(f"lang must be one of {', '.join(LANGS)}, got {lang!r}", parameter="lang")
    return lang


def check_k(k: int, name: str = "k") -> int:
    """``k`` if 1 <= k <= :data:`MAX_K`, else :class:`InvalidRequest` naming the parameter."""
    if k < 1 or k > MAX_K:
        raise InvalidRequest(f"{name} must be between 1 and {MAX_K}, got {k}", parameter=name)
    return k


def check_members(members: int | None) -> int | None:
    """``members`` (members listed per cluster; ``None``: all) if it is not negative, else :class:`InvalidRequest`."""
    if members is not None and members < 0:
        raise InvalidRequest(f"members cannot be negative, got {members}", parameter="members")
    return members


#: Every flag of ``incidentlib import`` that the import's messages may name.  The messages name an option by its flag:
#: the CLI is the edge the others document themselves against (``POST /import``'s ``maps`` are "as ``--map``").  An
#: edge whose users know an option by another name (the web form's "Field mapping") renames the flags once, in its
#: adapter, with :func:`name_options`; the import keeps one set of messages.
IMPORT_FLAGS = ("--map", "--set", "--date-format", "--keep-near-duplicates", "--format")
#: A flag written as a word of its own: not inside a longer flag (``--format`` in ``--format-x``) or a word.
_IMPORT_FLAG = re.compile(r"(?<![\w-])(" + "|".join(re.escape(flag) for flag in IMPORT_FLAGS) + r")(?![\w-])")


def name_options(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each flag of :data:`IMPORT_FLAGS` that ``names`` renames written as that name."""
    return _IMPORT_FLAG.sub(lambda match: names.get(match.group(1), match.group(1)), message)


#: Members listed per cluster by the MCP tool: a client model reads them as text, and a 100k library's clusters list
#: every incident; the cluster's ``size`` still counts all of them.
MCP_CLUSTER_MEMBERS = 50


def check_query(query: str, limit: int = MAX_QUERY_CHARS, name: str = "query") -> str:
    """The stripped query; :class:`QueryError` naming the argument ``name`` when it is empty, holds no letter or
    digit in any script, or is longer than
    ``limit`` characters (:data:`MAX_QUERY_CHARS`, or :data:`MAX_SIMILAR_TEXT_CHARS` for the text given to
    ``similar``)."""
    text = (query or "").strip()
    if not text:
        raise QueryError(f"{name} is empty", parameter=name)
    if not any(char.isalnum() for char in text):  # "!!!", an emoji, a zero-width space: nothing to match, only noise
        raise QueryError(f"{name} holds no letter or digit to search for", parameter=name)
    if len(text) > limit:
        raise QueryError(f"{name} is {len(text)} characters; the limit is {limit}", parameter=name)
    return text


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def with_filter_params(annotate: Callable[[FilterParam], Any]) -> Callable[[_Fn], _Fn]:
    """Replace a function's ``filters: IncidentFilter`` parameter by one keyword per :data:`FILTER_PARAMS`.

    ``annotate`` turns a rule into the adapter's annotation (a typer Option, a FastAPI Query,
    a pydantic Field for MCP). The wrapper collects the values into an :class:`IncidentFilter`.
    """

    def decorate(fn: _Fn) -> _Fn:
        signature = inspect.signature(fn, eval_str=True)
        flat = [
            inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotate(p))
            for p in FILTER_PARAMS
        ]
        params: list[inspect.Parameter] = []
        for param in signature.parameters.values():
            if param.name == "filters":
                params.extend(flat)
            else:
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                              if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and params
                              and params[-1].kind is inspect.Parameter.KEYWORD_ONLY else param)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {p.name: kwargs.pop(p.name, None) for p in FILTER_PARAMS}
            return fn(*args, filters=IncidentFilter.of(**values), **kwargs)

        new_signature = signature.replace(parameters=params)
        wrapper.__signature__ = new_signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            **{p.name: p.annotation for p in params},
            "return": signature.return_annotation,
        }
        del wrapper.__wrapped__  # introspection must see the new signature
        return wrapper  # type: ignore[return-value]

    return decorate


__all__ = [
    "ALERT_NAME_FIELDS",
    "ALERT_TEXT_FIELDS",
    "CONCEPT_FIELDS",
    "CONCEPT_FILTERS",
    "FILTER_PARAMS",
    "FORMAT_BY_SUFFIX",
    "IMPORT_FLAGS",
    "IMPORT_FORMATS",
    "INFERABLE_FILTERS",
    "LANGS",
    "MAX_AGENT_K",
    "MAX_AGENT_LIMIT",
    "MAX_ALERTS",
    "MAX_DEPTH",
    "MAX_DIAGNOSE_LIMIT",
    "MAX_ID_CHARS",
    "MAX_IMPORT_BYTES",
    "MAX_IMPORT_CHARS",
    "MAX_K",
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "MAX_RAG_K",
    "MAX_RECORD_BYTES",
    "MAX_REF_CHARS",
    "MAX_SERIES_BYTES",
    "MAX_SERIES_POINTS",
    "MAX_SIMILAR_TEXT_CHARS",
    "MAX_SPARQL_CHARS",
    "MAX_SYMPTOMS",
    "MAX_TOKEN_DAYS",
    "MAX_YEAR",
    "MCP_CLUSTER_MEMBERS",
    "MIN_YEAR",
    "FilterParam",
    "ImportFormatName",
    "IncidentFilter",
    "Lang",
    "Severity",
    "Status",
    "alert_payload_schema",
    "check_k",
    "check_lang",
    "check_members",
    "check_query",
    "file_suffix",
    "format_of_name",
    "name_options",
    "with_filter_params",
]
