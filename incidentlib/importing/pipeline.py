"""The import pipeline: read, map, recognise, de-duplicate, validate, then write all or nothing.

Imported incidents are written as drafts (``status: draft``) unless the record says
otherwise and passes every rule for published incidents.  Concepts recognised in
the text are stored as ``inferred`` links (evidence, method, confidence; see
:mod:`incidentlib.tagging`); they are never asserted as components, causes or symptoms.  New organizations and tags are
added to ``vocab/imported-organization.yaml`` and ``vocab/imported-tag.yaml``.

Nothing is written until every accepted record has been built and the resulting
library passes validation in a scratch copy.  The files then land all or nothing
(see :mod:`incidentlib.journal`): into an existing library through a journal whose
manifest is the commit point, and a new library is built in a sibling directory
that is renamed into place.  A killed import leaves the library as it was before
or, once the next command has run, as it would be after.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator

from ..errors import ImportFailed, MappingError, TableError
from ..gc_pause import collector_paused
from ..journal import JOURNAL_DIR, JournalBusy, commit_files, new_directory
from ..loader import INCIDENTS_DIR, VOCAB_DIR, Problem, check_library
from ..models import CONCEPT_FIELDS, LANGS, Concept, ConceptKind, Incident, InferredLink, padded_incident_id
from ..parsed_cache import WrittenFile
from ..paths import bundled_data_dir
from ..search.boilerplate import Boilerplate
from ..search.concepts import ConceptRecognizer
from ..storage import link_or_copy, write_durably
from ..tagging.tagger import ConceptTagger
from ..vocab import Vocabulary
from .ahead import WorkAhead
from .dates import parse_date
from .duplicates import DuplicateIndex, Fingerprints, Prepared
from .mapping import FieldMap, FieldSet, default_source, extract, placeholders, source_key, unread_keys, unread_layout
from .markup import as_text
from .readers import ImportFormat, RawRecord, read_records
from .yaml_out import dump_record, encoded_records

if TYPE_CHECKING:
    from ..tagging.signals import SignalConcepts

ProgressFn = Callable[[int, int], None]
#: A title made from a summary: its first sentence, cut to a headline's length.
TITLE_CHARS = 140
#: A summary made from a body: its first sentence, cut to a paragraph.
SUMMARY_CHARS = 400


class ImportOptions(BaseModel):
    format: ImportFormat
    maps: list[str] = Field(default_factory=list, description="FIELD=SOURCE mappings")
    sets: list[str] = Field(default_factory=list, description="FIELD=VALUE for every record; {path} from the record")
    id_prefix: str = "IL"
    lang: str = Field(default="en", pattern=r"^(en|ko)$")
    dry_run: bool = False
    keep_near_duplicates: bool = False
    date_format: str | None = Field(default=None, description="the file's date form, for strptime (%m/%d/%Y)")
    new_concepts: bool = Field(default=True, description=(
        "add the organizations and tags the vocabulary lacks, for review; False: reject a record that needs one, "
        "naming it (an import into the live store, whose vocabulary is curated in git)"))

    @field_validator("date_format")
    @classmethod
    def _date_format(cls, value: str | None) -> str | None:
        if value is not None and not re.search(r"%[yY]", value):
            raise ValueError(f"{value!r} names no year (strptime codes: %Y for 2024, %y for 24; %m, %d, %b, …)")
        return value

    @field_validator("id_prefix")
    @classmethod
    def _id_prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Z]{2,8}", value):
            raise ValueError(f"{value!r} must be 2 to 8 capital letters A-Z (incident ids are PREFIX-NNNN)")
        return value

    @field_validator("maps")
    @classmethod
    def _maps(cls, value: list[str]) -> list[str]:
        for option in value:
            FieldMap.parse(option)  # raises MappingError (a ValueError) naming the option
        return value

    @field_validator("sets")
    @classmethod
    def _sets(cls, value: list[str], info: ValidationInfo) -> list[str]:
        mapped = {FieldMap.parse(option).target for option in info.data.get("maps", [])}
        for option in value:
            target = FieldSet.parse(option).target  # raises MappingError naming the option
            if target in mapped:
                raise ValueError(f"--set {option!r}: {target} is also given by --map; give it one way")
        return value


class Accepted(BaseModel):
    id: str
    location: str
    title: str
    status: str
    suggestions: list[str]
    warnings: list[str] = Field(default_factory=list)


class Rejected(BaseModel):
    location: str
    reasons: list[str]
    duplicate_of: str | None = None


class ImportReport(BaseModel):
    source: str
    into: str
    format: str
    dry_run: bool
    written: bool
    accepted: list[Accepted] = Field(default_factory=list)
    rejected: list[Rejected] = Field(default_factory=list)
    new_organizations: list[str] = Field(default_factory=list)
    new_tags: list[str] = Field(default_factory=list)
    #: Keys (columns) of the file that no field was taken from, in the order first met: their values are not imported.
    unread_columns: list[str] = Field(default_factory=list)


def slugify(text: str, kind: str = "concept") -> str:
    """A concept id for a name: its Latin letters (accents dropped: Société is ``societe``) and digits joined by
    ``-``.  A name with letters of another script (결제팀, "결제팀 A") also gets a short digest of the whole name, so
    that two such names never share an id; a name with no Latin letter at all is ``kind-<digest>``.  The name itself
    stays the concept's label."""
    letters = [char for char in unicodedata.normalize("NFKD", text) if not unicodedata.combining(char)]
    slug = re.sub(r"[^a-z0-9]+", "-", "".join(letters).lower()).strip("-")
    if not any(char.isalnum() and not char.isascii() for char in letters):
        return slug or kind
    digest = hashlib.blake2b(" ".join(text.casefold().split()).encode("utf-8"), digest_size=4).hexdigest()
    return f"{slug or kind}-{digest}"


def compared_text(title: str, summary: str) -> str:
    """What the duplicate check compares of a record in one language: its title and summary, each its own line (so a
    title is a sentence of its own when template sentences are left out)."""
    return f"{title}\n{summary}".strip()


def _as_list(value: object, *, cell: bool = True) -> list[str]:
    """The values of a list field: a list's items whole (an object by its url, href or name); a single value (a CSV
    cell, ``cell``) split on ``;`` and ``|``."""
    if value is None:
        return []
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict):  # e.g. sources: [{url: …}]
                item = item.get("url") or item.get("href") or item.get("name") or ""
            out.extend(_as_list(item, cell=False))
        return out
    text = str(value).strip()
    if not text:
        return []
    if not cell:
        return [text]
    return [part.strip() for part in re.split(r"[;|]", text) if part.strip()]


def _signals(value: object, lang: str, warnings: list[str]) -> list[str | dict[str, Any]]:
    """The record's signals, verbatim: a list's items whole (a nested list's items too), each a string or
    ``{text, note}`` as the library writes them (a note in one language is in ``lang``); a single string one signal
    a line.  Log lines hold ``;`` and ``|``, so a signal is never split at them as a list cell is.  What cannot be
    a signal or a note is left out with a warning, as an unknown concept name is."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    found: list[str | dict[str, Any]] = []
    for item in items:
        if isinstance(item, list):
            found.extend(_signals(item, lang, warnings))
        elif isinstance(item, dict):
            text = item.get("text")
            if not isinstance(text, str) or not text.strip():
                warnings.append("signals: an object without a 'text' string; left out")
                continue
            signal: dict[str, Any] = {"text": text.strip()}
            note = _signal_note(item.get("note"), lang)
            if note:
                signal["note"] = note
            elif item.get("note") not in (None, "", {}):
                warnings.append(f"signals: the note of {text.strip()[:40]!r} is neither text nor an object with 'en' "
                                "and/or 'ko'; left out")
            found.append(signal)
        elif item is not None and str(item).strip():
            lines = [str(item)] if isinstance(value, list) else str(item).splitlines()
            found.extend(line.strip() for line in lines if line.strip())
    return found


def _signal_note(note: object, lang: str) -> dict[str, str]:
    if isinstance(note, str):
        return {lang: note.strip()} if note.strip() else {}
    if isinstance(note, dict):
        return {code: str(note[code]).strip() for code in LANGS if str(note.get(code) or "").strip()}
    return {}


#: A heading line of Markdown (``## Summary``) or Jira wiki markup (``h2. Summary``), and list or quote markers.
_HEADING_LINE = re.compile(r"^\s*(?:#{1,6}\s+|h[1-6]\.\s+)")
_LINE_MARKERS = re.compile(r"^\s*(?:[-*+>]\s+|\d{1,2}[.)]\s+)")  # "2024. A year of outages." is not a list


def _legacy_slug(text: str) -> str:
    """The id earlier versions gave a name (ASCII letters and digits only: "Café Corp" was ``caf-corp``), looked up
    so that a library's imported concepts keep matching."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _first_sentence(text: str, limit: int = TITLE_CHARS) -> str:
    """The first sentence of ``text`` at most ``limit`` characters long, headings and list markers left out (a
    write-up that opens with "h2. Summary" is not summed up by "h2.")."""
    lines = [_LINE_MARKERS.sub("", line) for line in text.strip().splitlines() if not _HEADING_LINE.match(line)]
    prose = " ".join(" ".join(lines).split()) or " ".join(_HEADING_LINE.sub("", text).split())
    sentence = re.split(r"(?<=[.!?])\s+", prose, maxsplit=1)[0]
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rsplit(" ", 1)[0] + "…"


#: Keys of the records listed in the error of a mapping that names none of them (a wide export has hundreds).
SHOWN_KEYS = 40
#: Fields without which every record is rejected or takes its text from elsewhere: a mapping of one of them that
#: finds nothing in any record can only be a mistake.
NEEDED_TARGETS = ("title", "org", "source_url")
#: Distinct texts (title and summary) a sentence must be in to be left out of the duplicate check as a template.
#: Higher than the similarity's 3 (:data:`~incidentlib.search.boilerplate.MIN_RECORDS`): an incident filed again a
#: few times, each copy with its own status line, shares all its other sentences, and those must still be compared.
#: A status page's template is in every incident of its history, so a history of ten or more is read right.
TEMPLATE_MIN_RECORDS = 10


class Importer:
    def __init__(self, target: Path, options: ImportOptions) -> None:
        self.target = target
        self.options = options
        try:
            self.maps = [FieldMap.parse(option) for option in options.maps]
            self.sets = [FieldSet.parse(option) for option in options.sets]
        except ValueError as exc:
            raise ImportFailed(str(exc)) from None
        data, problems = check_library(target)
        if problems or data is None:
            raise ImportFailed(f"target library {target} has problems; run `incidentlib validate --data {target}` first")
        self.data = data
        self.vocab: Vocabulary = data.vocab
        self.recognizer = ConceptRecognizer(data.vocab)
        # names and error messages only: an import stays fast and model-free; `incidentlib tag` adds the classifier
        self.tagger = ConceptTagger(data.vocab, signals=_signal_concepts(target, data.vocab))
        # made by prepare(), which knows the template sentences of the records to import; build() needs it first
        self.duplicates: DuplicateIndex
        self._extracted: dict[int, tuple[dict[str, object], list[str]]] = {}  # by id() of a prepared record
        # the work done ahead on the prepared records (prepare()), and each one's index there, by id() of the record
        self._ahead: WorkAhead[_AheadItem, _AheadResult] | None = None
        self._ahead_index: dict[int, int] = {}
        self.new_concepts: dict[ConceptKind, dict[str, Concept]] = {ConceptKind.organization: {}, ConceptKind.tag: {}}
        # concepts added while building the current record, dropped again if it is rejected (a list, so a rejection
        # costs what the record added, not a copy of everything added so far)
        self._added: list[tuple[ConceptKind, str]] = []
        prefix = f"{options.id_prefix}-"
        numbers = [int(i[len(prefix):]) for i in data.incidents if i.startswith(prefix)]
        self._next_number = max(numbers, default=0) + 1
        # the ids the records of this import name themselves (valid, not in the library), each claimed by the first
        # record naming it (:meth:`prepare`): an id made up for a record without one never takes a named id
        self._named: dict[str, str] = {}

    # ---- concepts ---------------------------------------------------------------
    def _concept(self, name: str, kind: ConceptKind, create: bool) -> str | None:
        concept = self.vocab.resolve(name, kind)
        if concept is not None:
            return concept.id
        slug = slugify(name, kind.value)
        for known in dict.fromkeys((slug, _legacy_slug(name))):  # ids imports made before this rule still match
            existing = self.vocab.get(known) if known else None
            if existing is not None and existing.kind == kind:
                return known
        pending = self.new_concepts.get(kind, {})
        if slug in pending:
            return slug
        if not create:
            return None
        taken_by_another_kind = slug in self.vocab or any(
            slug in added for other, added in self.new_concepts.items() if other != kind)
        if taken_by_another_kind:  # keep ids unique (an organization and a tag named alike: "edge" and "edge-tag")
            slug = f"{slug}-{kind.value}"
        if slug not in pending:
            self._added.append((kind, slug))
        pending[slug] = Concept.model_validate({"id": slug, "kind": kind, "label": {"en": name, "ko": name},
                                                "definition": {"en": f"Added by import; review the labels ({name})."}})
        return slug

    def _next_id(self) -> str:
        while True:
            candidate = f"{self.options.id_prefix}-{self._next_number:04d}"
            self._next_number += 1
            if candidate not in self.data.incidents and candidate not in self._named:
                return candidate

    def prepare(self, records: list[RawRecord]) -> None:
        """Before the first record is built: claim, for the first record naming it, every valid id the records name
        that the library does not hold; and index the library's records for the duplicate check, without the
        template sentences of the library and of ``records`` together."""
        self._check_sources(records)
        # a worker process starts now (importing the package while the records are read), and works ahead on what
        # depends on a record's text alone (_RecordWork: about half of a record) while this one does the rest in order
        try:
            self._ahead = WorkAhead(len(records))
        except ValueError as exc:  # a bad worker setting in the environment
            raise ImportFailed(str(exc)) from None
        texts: list[str] = []
        ahead_items: list[_AheadItem] = []
        for raw in records:
            extracted = self._extract(raw)
            self._extracted[id(raw)] = extracted  # built next from the same values, not extracted twice
            values = extracted[0]
            given = values.get("id")
            own = self._own_id(str(given)) if isinstance(given, (str, int)) else None
            if own is not None and own not in self.data.incidents:
                self._named.setdefault(own, raw.location)
            title, summary, body = _bilingual_texts(values, self.options.lang)
            compared = tuple(compared_text(title.get(code, ""), summary.get(code, "")) for code in LANGS)
            texts.extend(compared)
            if self._ahead.parallel:
                self._ahead_index[id(raw)] = len(ahead_items)
                ahead_items.append((_tagged_text(title, summary, body), compared))
        known = [(incident.id, [str(s.url) for s in incident.sources],
                  [compared_text(incident.title.get(code, False), incident.summary.get(code, False)) for code in LANGS])
                 for incident in self.data.incidents.values()]
        texts.extend(text for _, _, pair in known for text in pair)
        # a record imported twice is a duplicate, not a template: each distinct text counts once, and a sentence is a
        # template only past TEMPLATE_MIN_RECORDS texts, so a record filed a few times over is still caught
        self.duplicates = DuplicateIndex(boilerplate=Boilerplate(list(dict.fromkeys(t for t in texts if t)),
                                                                 min_records=TEMPLATE_MIN_RECORDS))
        self._ahead.start(_RecordWork(self.tagger, self.duplicates.fingerprints), ahead_items)
        for incident_id, urls, pair in known:
            self.duplicates.add(incident_id, urls, pair)

    def _extract(self, raw: RawRecord) -> tuple[dict[str, Any], list[str]]:
        """The record's mapped values, with HTML in its text fields read as text (:mod:`.markup`), and the mapping's
        problems."""
        values, unmatched = extract(raw.data, self.maps, sets=self.sets)
        for name in (*TEXT_FIELDS, *(f"{field}.{code}" for field in TEXT_FIELDS for code in LANGS)):
            value = values.get(name)
            if isinstance(value, str):
                values[name] = as_text(value)
            elif isinstance(value, list):
                values[name] = [as_text(item) if isinstance(item, str) else item for item in value]
            elif isinstance(value, dict):
                values[name] = {key: as_text(item) if isinstance(item, str) else item for key, item in value.items()}
        return values, unmatched

    def _check_sources(self, records: list[RawRecord]) -> None:
        """A ``--map`` or ``--set`` placeholder whose first key no record has, for a field every record needs
        (:data:`NEEDED_TARGETS`) or with a key of the records close to it, is a typo: refused before any record is built,
        with the keys the records do have (it warned once per record and imported every record without the field).
        For another field it may be a value this export left out of every record (exporters drop empty keys): each
        record says so, as before."""
        keys: dict[str, None] = {}
        for raw in records:
            keys.update(dict.fromkeys(str(key) for key in raw.data))
        given = [(m.target, f"--map {m.target}={m.source}", m.source) for m in self.maps]
        given += [(m.target, f"--set {m.target}={m.template}", path) for m in self.sets for path in placeholders(m.template)]
        for target, option, path in given:
            first = source_key(path)
            if first is None or first in keys:
                continue
            close = difflib.get_close_matches(first, list(keys), n=1)
            if target.split(".", 1)[0] in NEEDED_TARGETS or close:
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                shown = ", ".join(list(keys)[:SHOWN_KEYS]) + (" …" if len(keys) > SHOWN_KEYS else "")
                raise MappingError(f"{option}: no record has {first!r}{hint}; the records' keys are: {shown or 'none'}")

    def _own_id(self, given: str) -> str | None:
        """``given`` as an id of this import's prefix, its number written with at least 4 digits (a ticket key
        ``OPS-87`` is ``OPS-0087``, still read as the same ticket; 4 to 6 digits stay as written); None when it is
        not of that form."""
        padded = padded_incident_id(given)
        return padded if padded is not None and padded.startswith(f"{self.options.id_prefix}-") else None

    # ---- one record ------------------------------------------------------------
    def build(self, raw: RawRecord) -> tuple[Incident | None, Accepted | Rejected]:
        """One record -> a validated draft incident and its report row, or a rejection with every reason.

        Organizations and tags the record would add are kept only when it is accepted.
        """
        self._added = []
        incident, outcome = self._build(raw)
        if incident is not None and self._added and not self.options.new_concepts:
            names = {ConceptKind.organization: "organization", ConceptKind.tag: "tag"}
            outcome = Rejected(location=raw.location, reasons=[
                f"{'org' if kind is ConceptKind.organization else 'tags'}: unknown {names.get(kind, kind.value)} "
                f"{self.new_concepts[kind][slug].label.get('en')!r} ({slug}); the vocabulary is curated in git: add it "
                "to vocab/ there, or import on the command line, which adds it for review" for kind, slug in self._added])
            incident = None
        if incident is None:
            for kind, slug in self._added:
                self.new_concepts.get(kind, {}).pop(slug, None)
        return incident, outcome

    def _build(self, raw: RawRecord) -> tuple[Incident | None, Accepted | Rejected]:
        found = self._extracted.pop(id(raw), None)
        values, unmatched = found if found is not None else self._extract(raw)
        warnings: list[str] = list(unmatched)  # required fields that stay missing are rejected below
        shape = _shape_errors(values, warnings)
        if shape:  # a list where one name is expected would become a made-up name (["a", "b"] -> "a-b")
            return None, Rejected(location=raw.location, reasons=shape)
        reasons: list[str] = []
        title, summary, body = _bilingual_texts(values, self.options.lang)
        # explicit mappings that found nothing, by field (title.en counts for the title)
        missed = {problem.split(":", 1)[0].split(".", 1)[0]: problem for problem in unmatched}
        if not title:
            reasons.append(missed.get("title") or "no title, summary or body text (map one with --map title=…)")
        org_name = values.get("org")
        org_name = str(org_name).strip() if org_name not in (None, "") else None
        org = self._concept(org_name, ConceptKind.organization, create=True) if org_name else None
        if org is None:
            reasons.append(f"no organization ({missed.get('org') or 'map one with --map org=…'})")
        urls = _as_list(values.get("source_url"))
        if not urls:
            reasons.append(f"no source URL ({missed.get('source_url') or 'map one with --map source_url=…'})")
        record_date = self._record_date(raw, values, reasons, warnings)
        tags = [self._concept(t, ConceptKind.tag, create=True) for t in _as_list(values.get("tags"))]
        if raw.heading:
            tags.append(self._concept(raw.heading, ConceptKind.tag, create=True))
        concept_fields = self._asserted_concepts(values, warnings)
        if reasons:
            return None, Rejected(location=raw.location, reasons=reasons)

        texts = [compared_text(title.get(code, ""), summary.get(code, "")) for code in LANGS]
        tagged_text = _tagged_text(title, summary, body)
        ahead = self._done_ahead(raw, (tagged_text, tuple(texts)))
        duplicate = self.duplicates.find(urls, texts, ahead[1] if ahead is not None else None)
        if duplicate and duplicate.reason.startswith("same source URL"):
            return None, Rejected(location=raw.location, reasons=[duplicate.reason], duplicate_of=duplicate.of)
        if duplicate and not self.options.keep_near_duplicates:  # a page that fires again reads the same
            return None, Rejected(location=raw.location, duplicate_of=duplicate.of,
                                  reasons=[f"{duplicate.reason} (--keep-near-duplicates imports it anyway)"])

        # a record rejected above was never tagged here: only the worker, working ahead, may have tagged it
        links = ahead[0] if ahead is not None else [_stored_link(link) for link in self.tagger.infer([tagged_text])[0]]
        inferred = self._inferred(links, concept_fields)
        suggestions = [{"concept": link["concept"], "kind": link["kind"], "evidence": link["evidence"]} for link in inferred]
        status = _status(values.get("status"), warnings)
        record_id = self._record_id(values, warnings, raw.location)
        given = values.get("id")
        key = str(given).strip() if isinstance(given, (str, int)) and str(given).strip() else None
        replaced = key if key is not None and self._own_id(key) != record_id else None
        document = {
            "id": record_id,
            "status": status,
            "org": org,
            "date": record_date,
            "severity": _severity(values.get("severity"), warnings),
            "tags": list(dict.fromkeys(t for t in tags if t)),
            "title": title,
            "summary": summary,
            "body": body,
            **concept_fields,
            "signals": _signals(values.get("signals"), self.options.lang, warnings),
            "detection": _text(values, "detection", self.options.lang) or None,
            "mitigation": _text(values, "mitigation", self.options.lang) or None,
            "sources": _sources(values, urls, org_name, title, replaced),
            "inferred": inferred,
        }
        document = {k: v for k, v in document.items() if v not in (None, [], {})}
        validated = _validate(document, status, warnings, raw.location)
        if isinstance(validated, Rejected):
            return None, validated
        self.duplicates.add(validated.id, urls, texts)
        accepted = Accepted(id=validated.id, location=raw.location, title=next(iter(title.values())),
                            status=validated.status.value,
                            suggestions=[f"{s['kind']}:{s['concept']} ({s['evidence']})" for s in suggestions],
                            warnings=warnings)
        return validated, accepted

    def _record_date(self, raw: RawRecord, values: dict[str, Any], reasons: list[str], warnings: list[str]) -> str | None:
        """The record's date; one that cannot be read rejects the record when a ``--map``/``--set`` asked for it, and
        is left out with a warning naming its column when it was only found by a common name (a ``created`` column
        may hold something else)."""
        if values.get("date") in (None, ""):
            return None
        try:
            return parse_date(values["date"], self.options.date_format)
        except ValueError as exc:
            if any(given.target == "date" for given in self.maps) or any(given.target == "date" for given in self.sets):
                reasons.append(str(exc))
            else:
                column = default_source(raw.data, "date", self.maps, self.sets)
                warnings.append(f"{exc} (column {column!r}, read as the date for its name; map one with "
                                "--map date=…); left out")
            return None

    def _asserted_concepts(self, values: dict[str, Any], warnings: list[str]) -> dict[str, list[str]]:
        """Components, causes and symptoms the record names that the vocabulary knows (others become warnings)."""
        concept_fields: dict[str, list[str]] = {}
        for field in ASSERTED_FIELDS:
            resolved = []
            for name in _as_list(values.get(field)):
                concept_id = self._concept(name, CONCEPT_FIELDS[field], create=False)
                if concept_id is None:
                    warnings.append(f"{field}: {name!r} is not in the vocabulary; left out")
                else:
                    resolved.append(concept_id)
            concept_fields[field] = list(dict.fromkeys(resolved))
        return concept_fields

    def _done_ahead(self, raw: RawRecord, item: _AheadItem) -> _AheadResult | None:
        """:class:`_RecordWork` of the record's texts when a worker works ahead and the record was prepared with these
        texts; else ``None``, and build() does that work itself, the tagging only for a record it keeps (a text that
        build() changed since it was prepared, a shape it fixed, is not the one worked on)."""
        index = self._ahead_index.get(id(raw))
        if self._ahead is None or not self._ahead.parallel or index is None or self._ahead.items[index] != item:
            return None
        return self._ahead.result(index)

    def _inferred(self, links: list[dict[str, Any]], concept_fields: dict[str, list[str]]) -> list[dict[str, Any]]:
        """Concepts recognised in the text and not already asserted: inferred links with evidence, method
        and confidence (alias matching only: an import stays fast and model-free; ``incidentlib tag`` adds
        the classifier)."""
        asserted = {c for ids in concept_fields.values() for c in ids}
        return [link for link in links if link["concept"] not in asserted]

    def close(self) -> None:
        """The worker stopped, if one was started (idempotent)."""
        if self._ahead is not None:
            self._ahead.close()

    def _record_id(self, values: dict[str, Any], warnings: list[str], location: str) -> str:
        """The record's own id (:meth:`_own_id`) when it has the prefix's form, the library does not hold it and no
        earlier record of this import named it (:meth:`prepare`); else the next free one, with a warning saying why."""
        given = values.get("id")
        if given is None or given == "":
            return self._next_id()
        own = self._own_id(str(given)) if isinstance(given, (str, int)) else None
        if not isinstance(given, (str, int)):
            why = "is not a single value"
        elif own is None:
            why = f"does not have the form {self.options.id_prefix}-N (1 to 6 digits)"
        elif own in self.data.incidents:
            why = "is an incident of the library already"
        elif self._named.get(own, location) != location:
            why = f"is named by {self._named[own]} earlier in this import"
        else:
            return own
        new_id = self._next_id()
        warnings.append(f"id: {str(given)!r} {why}; imported as {new_id}")
        return new_id


#: Incident fields an import may assert directly (tags and organizations are created when new).
ASSERTED_FIELDS = ("components", "causes", "symptoms")
#: What :func:`_shape_errors` checks before anything is read from a record: fields that hold one value, texts that
#: may be given per language (``{en: …, ko: …}``), fields that take one value or a list (a record without a usable
#: one is rejected), and lists of names the record may leave out (an object there is left out with a warning, as an
#: unknown name is).
SINGLE_FIELDS = ("org", "status", "severity", "date")
TEXT_FIELDS = ("title", "summary", "body", "detection", "mitigation")
LIST_FIELDS = ("tags", "source_url")
OPTIONAL_LIST_FIELDS = ("signals", *ASSERTED_FIELDS)


def _kind_of(value: object) -> str:
    return "a list" if isinstance(value, list) else "an object"


def _shape_errors(values: dict[str, Any], warnings: list[str]) -> list[str]:
    """Reasons to reject a record whose fields have the wrong shape: a list or an object where one value is expected,
    an object with other keys than the two languages, an object where a list is expected.  An empty text object is
    taken as missing; an object among the optional lists is dropped with a warning (``values`` is changed)."""
    errors = []
    for name in SINGLE_FIELDS:
        if isinstance(values.get(name), (list, dict)):
            errors.append(f"{name}: expected one value, got {_kind_of(values[name])}")
    for name in TEXT_FIELDS:
        value = values.get(name)
        if isinstance(value, list) and any(isinstance(item, (list, dict)) for item in value):
            errors.append(f"{name}: expected text, a list of texts, or an object with 'en' and/or 'ko', got a list "
                          "holding lists or objects")
        elif isinstance(value, dict) and not value:
            values[name] = None
        elif isinstance(value, dict) and set(value) - set(LANGS):
            other = ", ".join(repr(str(key)) for key in value if key not in LANGS)
            errors.append(f"{name}: an object must hold the text under 'en' and/or 'ko', got {other}")
    for name in LIST_FIELDS:
        if isinstance(values.get(name), dict):
            errors.append(f"{name}: expected a value or a list of values, got an object")
    for name in OPTIONAL_LIST_FIELDS:
        if name == "signals" and isinstance(values.get(name), dict) and "text" in values[name]:
            continue  # one signal as the library writes it: {text, note}
        if isinstance(values.get(name), dict):
            warnings.append(f"{name}: an object, not a value or a list of values; left out")
            values[name] = None
    return errors


#: Share of a text's letters that are Hangul from which it is read as Korean.  A Korean write-up names its parts in
#: Latin letters (GPU, NCCL, Xid) and a Hangul syllable is a whole part of a word, so a third of the letters is
#: already a Korean text; an English text that quotes a Korean name stays far below it.
KOREAN_SHARE = 0.3
_HANGUL_SYLLABLE = re.compile(r"[\uac00-\ud7a3]")
_LATIN_LETTER = re.compile(r"[A-Za-z]")


def language_of(text: str, default: str) -> str:
    """``ko`` for a text of Korean (:data:`KOREAN_SHARE` of its letters Hangul), ``en`` for one of Latin letters,
    ``default`` (``--lang``) for one with neither: a bilingual team's archive mixes the two, and a Korean text
    stored as English is searched, shown and checked as English."""
    if text.isascii():  # no Hangul: English when it has a letter (the count below, without listing every letter)
        return "en" if _LATIN_LETTER.search(text) else default
    hangul = len(_HANGUL_SYLLABLE.findall(text))
    latin = len(_LATIN_LETTER.findall(text))
    if hangul + latin == 0:
        return default
    return "ko" if hangul >= KOREAN_SHARE * (hangul + latin) else "en"


def _text(values: dict[str, Any], name: str, lang: str, lines: bool = False) -> dict[str, str]:
    """A text field as ``{lang: text}``: a bare value is in the language its letters say (:func:`language_of`;
    ``lang`` for a text without letters); ``name.en`` / ``name.ko`` or a mapping add languages.  A bare value's whitespace is collapsed to single spaces unless it is the body or ``lines``; a list of
    values (``incident_updates[].body``) is one text, its items as paragraphs."""
    found: dict[str, str] = {}
    bare = values.get(name)
    if isinstance(bare, list):
        bare = "\n\n".join(str(item).strip() for item in bare if item not in (None, "") and str(item).strip())
    if isinstance(bare, dict):  # already {en: …, ko: …}; a language of only spaces is missing
        found.update({k: str(v).strip() for k, v in bare.items() if k in LANGS and v and str(v).strip()})
    elif bare not in (None, "") and str(bare).strip():
        code = language_of(str(bare), lang)
        if name == "body":
            found[code] = str(bare).strip()
        elif lines:  # spaces collapsed within each line, the line breaks kept (blank lines at most one in a row)
            kept = "\n".join(" ".join(line.split()) for line in str(bare).strip().splitlines())
            found[code] = re.sub(r"\n{3,}", "\n\n", kept)
        else:
            found[code] = " ".join(str(bare).split())
    for code in LANGS:
        value = values.get(f"{name}.{code}")
        if value not in (None, "") and str(value).strip():
            found[code] = str(value).strip()
    return found


#: What :class:`_RecordWork` takes of a record: the text it is tagged by, and the texts the duplicate check compares.
_AheadItem = tuple[str, tuple[str, ...]]
#: What it gives: the inferred links of the first, and the duplicate check's fingerprints of the others.
_AheadResult = tuple[list[dict[str, Any]], list[Prepared]]


@dataclass(frozen=True)
class _RecordWork:
    """What an import computes of a record from its texts alone (done ahead by :class:`~.ahead.WorkAhead`): its
    inferred links (``tagger.infer``, each text's links its own) and its duplicate check's fingerprints."""

    tagger: ConceptTagger
    fingerprints: Fingerprints

    def __call__(self, items: list[_AheadItem]) -> list[_AheadResult]:
        links = self.tagger.infer([tagged for tagged, _ in items])
        return [([_stored_link(link) for link in found], [self.fingerprints(text) for text in compared])
                for found, (_, compared) in zip(links, items, strict=True)]


def _stored_link(link: InferredLink) -> dict[str, Any]:
    """An inferred link as a record stores it (its confidence always written), made by whichever process tagged it:
    plain values cross the pipe faster than models."""
    return link.model_dump(mode="json", exclude_defaults=True) | {"confidence": link.confidence}


def _tagged_text(title: dict[str, str], summary: dict[str, str], body: dict[str, str]) -> str:
    """The text a record is tagged by: its title, summary and body in each language, each distinct one once."""
    return "\n\n".join(dict.fromkeys(t for t in (*title.values(), *summary.values(), *body.values()) if t))


def _bilingual_texts(values: dict[str, Any], lang: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Title, summary and body, each filled from the others when missing (first sentence, 140 / 400 characters)."""
    summary = _text(values, "summary", lang)
    body = _text(values, "body", lang)
    title = _text(values, "title", lang)
    if not title and (summary or body):
        base = _text(values, "summary", lang, lines=True) or body
        title = {code: _first_sentence(value) for code, value in base.items()}
    if not summary and body:
        summary = {code: _first_sentence(value, SUMMARY_CHARS) for code, value in body.items()}
    if not body and summary:  # the summary's own line breaks (a description with log lines) kept in the body
        body = _text(values, "summary", lang, lines=True)
    if not summary and not body and title:  # a ticket or an alert with a title only
        summary, body = dict(title), dict(title)
    return title, summary, body


#: Severity as tools write it, read to the library's sev1–sev4: "sev1", "SEV-2", "Sev 3", "severity 4", "S1", a bare
#: level ("2") or one with its name ("1 - Critical", ServiceNow).  Priorities (P1) and words (Highest) are another
#: scale; they are left out with a warning rather than mapped by a guess.
_SEVERITY = re.compile(r"^(?:sev(?:erity)?|s)?[\s_-]*([1-4])(?:\s*[-–:]\s*[^\W\d_].*|\s*\(.*\))?$", re.IGNORECASE)


def _severity(value: object, warnings: list[str]) -> str | None:
    if value in (None, ""):
        return None
    match = _SEVERITY.match(" ".join(str(value).split()))
    if match is None:
        warnings.append(f"severity: {value!r} is not sev1 to sev4 (map a field that holds them); left out")
        return None
    return f"sev{match.group(1)}"


def _status(value: object, warnings: list[str]) -> str:
    """A record's status when it is one of the library's (draft, published), else draft: a ticket's own status
    (resolved, Done) says where the ticket is, not whether the record was reviewed."""
    if value in (None, ""):
        return "draft"
    status = str(value).strip().lower()
    if status in ("draft", "published"):
        return status
    warnings.append(f"status: {value!r} is not draft or published; imported as a draft")
    return "draft"


def _sources(values: dict[str, Any], urls: list[str], org_name: object, title: dict[str, str],
             key: str | None) -> list[dict[str, Any]]:
    """The record's sources; without a source title, "<key>: <title>" when the record's own id (a ticket key) was
    replaced (so the key stays with the record), else "<org>: <title>"."""
    heading = _first_sentence(next(iter(title.values())), 80)
    default = f"{key}: {heading}" if key else f"{org_name}: {heading}"
    return [{"url": url, "title": str(values.get("source_title") or default),
             "publisher": values.get("source_publisher") or str(org_name), "kind": values.get("source_kind") or "postmortem"}
            for url in urls]


def _validate(document: dict[str, Any], status: str, warnings: list[str], location: str) -> Incident | Rejected:
    """The incident, or (for a record claiming to be published but incomplete) the same record kept as a draft."""
    try:
        return Incident.model_validate(document)
    except ValidationError as exc:
        if status == "draft":
            return Rejected(location=location, reasons=validation_reasons(exc))
        document["status"] = "draft"
        warnings.append(f"kept as a draft: {exc.error_count()} rule(s) for published incidents not met")
    try:
        return Incident.model_validate(document)
    except ValidationError as inner:
        return Rejected(location=location, reasons=validation_reasons(inner))


def validation_reasons(exc: ValidationError) -> list[str]:
    """Each of pydantic's errors as ``field.path: reason``, without its report around them."""
    return [f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()]


def _seed_library(folder: Path) -> None:
    """A new library starts with the bundled vocabulary and no incidents."""
    (folder / INCIDENTS_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copytree(bundled_data_dir() / VOCAB_DIR, folder / VOCAB_DIR)


def _signal_concepts(target: Path, vocab: Vocabulary) -> SignalConcepts:
    """The signal table's concepts for the target library (its own table, or the bundled one)."""
    from ..analysis.families import compile_table
    from ..analysis.tables import load_signals
    from ..tagging.signals import SignalConcepts

    try:
        return SignalConcepts(compile_table(load_signals(target, vocab)), vocab)
    except TableError as exc:
        raise ImportFailed(f"target library {target}: {exc}") from None


def run_import(source: Path, target: Path, options: ImportOptions, progress: ProgressFn | None = None) -> ImportReport:
    """Import ``source`` into ``target`` (created when missing), all or nothing; see the module docstring."""
    # the records read and the incidents built stay alive to the end, and each full pass of the cyclic collector would
    # walk them all again (7 of 56 s at 30,000 records, docs/benchmarks.md): paused, as for a load (incidentlib.gc_pause)
    with collector_paused():
        return _read_and_import(source, target, options, progress)


def _read_and_import(source: Path, target: Path, options: ImportOptions, progress: ProgressFn | None) -> ImportReport:
    try:
        records = read_records(source, options.format)
    except ValueError as exc:
        raise ImportFailed(str(exc)) from None
    if (target / VOCAB_DIR).is_dir():
        return _import_records(records, source, target, options, progress, fresh=False)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ImportFailed(f"{target} exists but is not a library directory (no {VOCAB_DIR}/ folder)")
    # a new library is built whole in a sibling folder, then renamed into place in one step (over an empty folder:
    # removing that first would leave nothing where it was when the import writes nothing, or is stopped)
    with new_directory(target) as fresh:
        _seed_library(fresh.path)
        report = _import_records(records, source, fresh.path, options, progress, fresh=True)
        report.into = str(target)
        fresh.keep = report.written
    return report


def _import_records(records: list[RawRecord], source: Path, target: Path, options: ImportOptions,
                    progress: ProgressFn | None, fresh: bool) -> ImportReport:
    importer = Importer(target, options)
    report = ImportReport(source=str(source), into=str(target),
                          format=options.format.value, dry_run=options.dry_run, written=False)
    built: list[Incident] = []
    unread: dict[str, None] = {}
    layouts: set[tuple[tuple[object, int], ...]] = set()
    try:
        importer.prepare(records)
        for index, raw in enumerate(records, 1):
            layout = unread_layout(raw.data)
            if layout not in layouts:  # the same layout, the same unread keys: each layout is worked out once
                layouts.add(layout)
                unread.update(dict.fromkeys(unread_keys(raw.data, importer.maps, importer.sets)))
            incident, outcome = importer.build(raw)
            if incident is not None:
                built.append(incident)
                report.accepted.append(outcome)  # type: ignore[arg-type]
            else:
                report.rejected.append(outcome)  # type: ignore[arg-type]
            if progress:
                progress(index, len(records))
    finally:
        importer.close()
    report.new_organizations = sorted(importer.new_concepts[ConceptKind.organization])
    report.new_tags = sorted(importer.new_concepts[ConceptKind.tag])
    report.unread_columns = [str(key) for key in unread]
    if options.dry_run or not built:
        return report
    _write_all(target, built, importer.new_concepts, fresh)
    report.written = True
    return report


def _vocab_additions(target: Path, new_concepts: dict[ConceptKind, dict[str, Concept]]) -> dict[str, str]:
    files: dict[str, str] = {}
    for kind, concepts in new_concepts.items():
        if not concepts:
            continue
        rel = f"{VOCAB_DIR}/imported-{kind.value}.yaml"
        path = target / rel
        existing = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {"kind": kind.value, "concepts": []}
        existing["concepts"].extend(c.model_dump(mode="json", exclude_none=True, exclude={"kind", "alt"}) for c in concepts.values())
        files[rel] = "# Added by `incidentlib import`; review labels (ko/en) and definitions.\n" + dump_record(existing)
    return files


def _problems_text(problems: list[Problem]) -> str:
    return "the import would break the library; nothing was written:\n" + "\n".join(f"  - {p}" for p in problems[:20])


def _record_document(incident: Incident) -> dict[str, Any]:
    """What a record's file holds: the incident's fields without the defaults, its id, status and organization first."""
    return (incident.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
            | {"id": incident.id, "status": incident.status.value, "org": incident.org})


class _RecordDocuments(Sequence[dict[str, Any]]):
    """:func:`_record_document` of each incident, made when a batch of them is taken (by the thread feeding the worker,
    or by this process for a batch it dumps itself): the worker starts on the first batch while the rest are made, and
    the documents of the whole import are never in memory at once."""

    def __init__(self, incidents: list[Incident]) -> None:
        self._incidents = incidents

    def __len__(self) -> int:
        return len(self._incidents)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [_record_document(incident) for incident in self._incidents[index]]
        return _record_document(self._incidents[index])


class _ArrivingFiles(Mapping[str, bytes]):
    """The files an import writes, by path: the ones ready at once, then each record's bytes as they come from
    :class:`~.ahead.WorkAhead` (``result(i)`` for the ``i``-th record path), taken in order and kept.  Whoever reads
    the files in order (the staging writes) writes each one while the worker dumps the next ones, rather than after
    every record was dumped."""

    def __init__(self, ready: dict[str, bytes], records: list[str], arriving: WorkAhead[Any, bytes]) -> None:
        self._files = dict(ready)
        self._paths = [*ready, *records]
        self._records = records
        self._index = {rel: index for index, rel in enumerate(records)}
        self._arriving = arriving
        self._taken = 0  # records taken from ``arriving`` so far

    def __getitem__(self, rel: str) -> bytes:
        found = self._files.get(rel)
        if found is not None:
            return found
        index = self._index[rel]  # KeyError: not a file of this import
        while self._taken <= index:  # WorkAhead.result() is asked with indexes that never decrease
            self._files[self._records[self._taken]] = self._arriving.result(self._taken)
            self._taken += 1
        return self._files[rel]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def _write_all(target: Path, incidents: list[Incident], new_concepts: dict[ConceptKind, dict[str, Concept]], fresh: bool) -> None:
    ready = {rel: text.encode("utf-8") for rel, text in _vocab_additions(target, new_concepts).items()}
    validated: dict[str, Incident] = {}  # by path; as the check takes them (not validated a second time)
    for incident in incidents:
        rel = f"{INCIDENTS_DIR}/{incident.id}.yaml"
        if (target / rel).exists():
            raise ImportFailed(f"{target / rel} already exists; nothing was written")
        # ids are unique within an import (Importer._record_id); never let one record replace another
        if rel in ready or rel in validated:
            raise ImportFailed(f"two records of this import were both given {incident.id}; nothing was written")
        validated[rel] = incident

    def check(folder: Path) -> None:
        # the library is checked with the new records as they were dumped, not read back from their files, parsed and
        # validated again (a dump reads back as its document, tests/test_fast_paths.py, which validates to the same
        # incident, tests/test_import.py): what the check takes each new record's file to hold is the bytes written
        written = {rel: WrittenFile(files[rel], incident) for rel, incident in validated.items()}
        _, problems = check_library(folder, written=written)
        if problems:
            raise ImportFailed(_problems_text(problems))

    # about half the records are dumped by a worker process, which starts on the first batch while the rest are made
    # into documents, and whose files are written as they come
    with WorkAhead[dict[str, Any], bytes](len(validated)) as ahead:
        ahead.start(encoded_records, _RecordDocuments(list(validated.values())))
        files = _ArrivingFiles(ready, list(validated), ahead)
        if fresh:  # a private scratch folder that becomes the library only if it validates
            # flushed to disk before the folder is renamed into place: a library is never there with half-written files
            write_durably((os.path.join(target, rel), payload) for rel, payload in files.items())
            ahead.close()  # every file is in: the worker is done
            check(target)
            return

        def rehearse(staged: Path) -> None:
            ahead.close()  # every file is staged: the worker is done
            # the library must validate with the new files in it; the copy lives in the journal, so a
            # killed rehearsal is removed by the next command like any uncommitted change.  Its files are hard links
            # (the check only reads them), not copies of the whole library and of every new record
            rehearsal = staged.parent / "incidentlib-import-rehearsal"
            shutil.copytree(target, rehearsal, ignore=shutil.ignore_patterns(JOURNAL_DIR), copy_function=link_or_copy)
            for rel in files:
                link_or_copy(os.path.join(staged, rel), os.path.join(rehearsal, rel))
            try:
                check(rehearsal)
            finally:
                shutil.rmtree(rehearsal, ignore_errors=True)

        try:
            commit_files(target, files, before_commit=rehearse)
        except JournalBusy as exc:
            raise ImportFailed(str(exc)) from None
