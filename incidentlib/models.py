"""Typed records of the library: incidents, concepts and organizations.

These models are the contract between the YAML files under ``data/`` and every
other part of incidentlib.  They validate shape only; cross-references (does a
concept id exist? are ids unique?) are checked by :mod:`incidentlib.loader`,
which sees the whole library at once.
"""

from __future__ import annotations

import functools
import re
from datetime import date as _date
from enum import Enum
from typing import Literal

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

LANGS: tuple[str, ...] = ("en", "ko")
Lang = Literal["en", "ko"]

# The curated library uses IL-NNNN; imports may choose another prefix (--id-prefix).
INCIDENT_ID_RE = re.compile(r"^[A-Z]{2,8}-\d{4,6}$")
CONCEPT_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_SHORT_ID_RE = re.compile(r"^([A-Z]{2,8})-(\d{1,6})$")


def padded_incident_id(given: str) -> str | None:
    """``given`` as the library writes an incident id, its number with at least 4 digits: a ticket key ``OPS-87`` is
    ``OPS-0087`` (as an import stores it), ``IL-000123`` stays as written; None when it is not ``PREFIX-N`` (N > 0)."""
    match = _SHORT_ID_RE.match(given.strip())
    if match is None or not int(match.group(2)):
        return None
    return f"{match.group(1)}-{match.group(2).zfill(4)}"
_DATE_RE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")


class Record(BaseModel):
    """Base for every stored record: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class Text(Record):
    """A short text in one or both languages."""

    en: str | None = None
    ko: str | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> Text:
        if not (self.en or self.ko):
            raise ValueError("needs text in at least one language (en or ko)")
        return self

    def get(self, lang: str, fallback: bool = True) -> str:
        """The text in ``lang``; the other language when missing and ``fallback``."""
        value = getattr(self, lang, None)
        if value or not fallback:
            return value or ""
        return self.en or self.ko or ""

    def languages(self) -> list[str]:
        return [lang for lang in LANGS if getattr(self, lang)]


class BilingualText(Text):
    """A text that must exist in both Korean and English (titles, summaries)."""

    @model_validator(mode="after")
    def _both(self) -> BilingualText:
        missing = [lang for lang in LANGS if not getattr(self, lang)]
        if missing:
            raise ValueError(f"missing required language(s): {', '.join(missing)}")
        return self


class AltLabels(Record):
    en: list[str] = Field(default_factory=list)
    ko: list[str] = Field(default_factory=list)

    def get(self, lang: str) -> list[str]:
        return list(getattr(self, lang, []) or [])

    def all(self) -> list[str]:
        return [*self.en, *self.ko]


class ConceptKind(str, Enum):
    component = "component"
    cause = "cause"
    symptom = "symptom"
    tag = "tag"
    organization = "organization"


#: Which incident field refers to which vocabulary kind (the one definition; everything else derives from it).
CONCEPT_FIELDS: dict[str, ConceptKind] = {
    "org": ConceptKind.organization,
    "components": ConceptKind.component,
    "causes": ConceptKind.cause,
    "symptoms": ConceptKind.symptom,
    "tags": ConceptKind.tag,
}


class Concept(Record):
    """A controlled-vocabulary entry; becomes a ``skos:Concept``."""

    id: str
    kind: ConceptKind
    label: BilingualText
    alt: AltLabels = Field(default_factory=AltLabels)
    broader: str | None = None
    definition: Text | None = None
    url: AnyHttpUrl | None = None
    #: Latin names recognised in free text only as written, because in lower case they are an everyday word
    #: ("UPS" in "follow-ups", "VAST" in "the vast majority", "PACE" in "sets the pace").
    cased: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not CONCEPT_ID_RE.match(value):
            raise ValueError(f"concept id {value!r} must be lowercase words joined by '-'")
        return value

    @model_validator(mode="after")
    def _cased_are_names(self) -> Concept:
        names = set(self.names())
        unknown = [name for name in self.cased if name not in names]
        if unknown:
            raise ValueError(f"cased names {unknown} are not among the concept's labels and aliases (write them as there)")
        return self

    def names(self) -> list[str]:
        """Every label and alias in both languages."""
        return [self.label.en or "", self.label.ko or "", *self.alt.all()]


class SourceKind(str, Enum):
    postmortem = "postmortem"
    status_page = "status-page"
    blog = "blog"
    paper = "paper"
    report = "report"
    news = "news"
    talk = "talk"
    advisory = "advisory"
    logbook = "logbook"
    documentation = "documentation"
    catalog = "catalog"


class Source(Record):
    url: AnyHttpUrl
    title: str
    publisher: str | None = None
    kind: SourceKind = SourceKind.postmortem
    published: str | None = None

    @field_validator("published", mode="before")
    @classmethod
    def _published(cls, value: str | None) -> str | None:
        return None if value is None else check_partial_date(value)


class Signal(Record):
    """A verbatim error string or log line as it appeared in public."""

    text: str
    note: Text | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: object) -> object:
        return {"text": value} if isinstance(value, str) else value

    @field_validator("text")
    @classmethod
    def _nonempty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("signal text is empty")
        return value


class RelatedLink(Record):
    """An explicit, curated link to another incident, with the reason for it."""

    id: str
    reason: Text

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_incident_id(value)


class Severity(str, Enum):
    sev1 = "sev1"
    sev2 = "sev2"
    sev3 = "sev3"
    sev4 = "sev4"


class DateKind(str, Enum):
    occurred = "occurred"
    published = "published"


class Status(str, Enum):
    """``published`` records meet every rule; ``draft`` records (from importers) await review."""

    published = "published"
    draft = "draft"


class ConceptSuggestion(Record):
    """A concept an importer recognised in the text, with the words that suggested it."""

    concept: str
    kind: ConceptKind
    evidence: str


class InferenceMethod(str, Enum):
    """How an inferred concept link was found."""

    alias = "alias"  # a label or alias of the concept is written in the text
    loose_alias = "loose-alias"  # a label or alias written with a word inside it ("bad firewall config")
    classifier = "classifier"  # a model trained on curated links predicts it from the text
    signal = "signal"  # an error message of the signal table ("Xid 79") that points to the concept


class InferredStatus(str, Enum):
    """``proposed`` links are used with their confidence; ``rejected`` ones are kept so they are not proposed again."""

    proposed = "proposed"
    rejected = "rejected"


#: The kinds of concept a text is tagged with (an organisation or a tag is never inferred).
INFERRED_KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom)


class InferredLink(Record):
    """A component, cause or symptom recognised in an incident's text, never asserted by a curator.

    Stored apart from the curated ``components`` / ``causes`` / ``symptoms`` with its provenance:
    the words that support it (``evidence``), the ``method`` and a ``confidence`` in [0, 1].
    ``incidentlib review`` turns a proposed link into a curated one (accept) or marks it rejected.
    """

    concept: str
    kind: ConceptKind
    evidence: str
    method: InferenceMethod
    confidence: float = Field(ge=0.0, le=1.0)
    status: InferredStatus = InferredStatus.proposed

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: ConceptKind) -> ConceptKind:
        if value not in INFERRED_KINDS:
            raise ValueError(f"inferred links are components, causes or symptoms, not {value.value}")
        return value


class Incident(Record):
    """One documented incident, as stored in ``data/incidents/IL-NNNN.yaml``.

    Published records need both languages in ``title`` and ``summary``, a ``date`` and
    at least one component.  Drafts (``status: draft``, written by importers) may have
    one language, no date and no components yet; their recognised concepts wait in
    ``suggestions`` until a curator accepts them.
    """

    id: str
    status: Status = Status.published
    org: str
    date: str | None = Field(default=None, validate_default=True)
    date_kind: DateKind = DateKind.occurred
    severity: Severity | None = None
    tags: list[str] = Field(default_factory=list)
    title: Text
    summary: Text
    body: Text
    components: list[str] = Field(default_factory=list, validate_default=True)
    causes: list[str] = Field(default_factory=list)
    symptoms: list[str] = Field(default_factory=list)
    signals: list[Signal] = Field(default_factory=list)
    detection: Text | None = None
    mitigation: Text | None = None
    lessons: list[Text] = Field(default_factory=list)
    sources: list[Source] = Field(min_length=1)
    related: list[RelatedLink] = Field(default_factory=list)
    suggestions: list[ConceptSuggestion] = Field(default_factory=list)
    inferred: list[InferredLink] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_incident_id(value)

    @field_validator("date", mode="before")
    @classmethod
    def _date(cls, value: object, info: ValidationInfo) -> str | None:
        if value is None:
            if _is_draft(info):
                return None
            raise ValueError("date is required (YYYY-MM-DD, YYYY-MM or YYYY); only drafts may leave it out")
        return check_partial_date(value)

    @field_validator("title", "summary")
    @classmethod
    def _bilingual(cls, value: Text, info: ValidationInfo) -> Text:
        missing = [lang for lang in LANGS if not getattr(value, lang)]
        if missing and not _is_draft(info):
            raise ValueError(f"missing required language(s): {', '.join(missing)}")
        return value

    @field_validator("components")
    @classmethod
    def _components(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if not value and not _is_draft(info):
            raise ValueError("at least one component is required; only drafts may leave it empty")
        return value

    @property
    def is_draft(self) -> bool:
        return self.status is Status.draft

    @property
    def year(self) -> int | None:
        return int(self.date[:4]) if self.date else None

    def proposed(self, kind: str | None = None) -> list[InferredLink]:
        """Inferred links still proposed (not rejected) and not already curated, optionally of one kind."""
        curated = {*self.components, *self.causes, *self.symptoms}
        return [link for link in self.inferred
                if link.status is InferredStatus.proposed and link.concept not in curated
                and (kind is None or link.kind.value == kind)]

    def weighted_concepts(self) -> dict[str, float]:
        """Components, causes and symptoms with a weight: 1 for curated links, the confidence for inferred ones."""
        weights = dict.fromkeys((*self.components, *self.causes, *self.symptoms), 1.0)
        for link in self.proposed():
            weights[link.concept] = max(weights.get(link.concept, 0.0), link.confidence)
        return weights

    def concept_ids(self) -> dict[str, list[str]]:
        """Concept ids by vocabulary kind, as referenced by this incident."""
        return {
            "component": list(self.components),
            "cause": list(self.causes),
            "symptom": list(self.symptoms),
            "tag": list(self.tags),
            "organization": [self.org],
        }


def _is_draft(info: ValidationInfo) -> bool:
    return info.data.get("status") is Status.draft


def check_incident_id(value: str) -> str:
    if not INCIDENT_ID_RE.match(value):
        raise ValueError(f"incident id {value!r} must look like IL-0001 (an uppercase prefix, '-', 4 to 6 digits)")
    return value


#: Distinct date strings whose check is remembered: more than every day of a century (36,525), so a library's
#: dates are each checked once however many records and sources share them (247k checks, 1.6 s, at 100k records).
PARTIAL_DATE_MEMO = 65_536


def check_partial_date(value: object) -> str:
    """Accept YYYY-MM-DD, or YYYY-MM / YYYY when the day or month is not public."""
    if isinstance(value, _date):
        return value.isoformat()
    return _checked_partial_date(str(value))


@functools.lru_cache(maxsize=PARTIAL_DATE_MEMO)
def _checked_partial_date(text: str) -> str:
    """:func:`check_partial_date` of a string (a refused one raises and is not remembered)."""
    match = _DATE_RE.match(text)
    if not match:
        raise ValueError(f"date {text!r} must be YYYY-MM-DD, or YYYY-MM / YYYY when the day or month is not public")
    year, month, day = match.groups()
    try:
        _date(int(year), int(month or 1), int(day or 1))
    except ValueError as exc:
        raise ValueError(f"date {text!r} is not a real calendar date: {exc}") from None
    return text
