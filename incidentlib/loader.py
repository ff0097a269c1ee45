"""Load a library directory and validate it as a whole.

Every problem is collected before anything is reported, so ``incidentlib validate``
can list them all at once; :func:`load_library` refuses a library with problems.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from . import file_memo, start_snapshot
from .errors import LibraryError
from .field_sets import FieldSetSharer
from .gc_pause import collector_paused
from .journal import recover
from .models import CONCEPT_FIELDS, LANGS, Concept, ConceptKind, Incident
from .overlaid import OverlaidRecords
from .parsed_cache import YAML_LOADER, DataFiles, relative_name
from .start_snapshot import snapshot_key
from .vocab import Vocabulary

if TYPE_CHECKING:
    from .search.chunks import Chunk

VOCAB_DIR = "vocab"
INCIDENTS_DIR = "incidents"

# Which incident field refers to which vocabulary kind.
REFERENCE_FIELDS = CONCEPT_FIELDS


class Problem(BaseModel):
    """One validation problem: where it is and what is wrong."""

    file: str
    field: str | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class LibraryData:
    """A validated library: its vocabulary, its incidents and where they came from.

    ``snapshot_key`` is the key of the start snapshot of these exact files (set when they were loaded with a
    cache directory and had no problem; :mod:`incidentlib.start_snapshot`); ``chunks`` each incident's chunks
    when they came from that snapshot (cut from these very incident and vocabulary objects)."""

    root: Path
    vocab: Vocabulary
    incidents: Mapping[str, Incident]
    content_hash: str
    snapshot_key: str | None = dataclass_field(default=None, compare=False, repr=False)
    chunks: Mapping[str, Sequence[Chunk]] | None = dataclass_field(default=None, compare=False, repr=False)


NOT_A_FILE = "not a regular file (a directory, or a symbolic link to nothing); remove or rename it"


def each_record(incidents: Mapping[str, Incident]) -> Iterator[Incident]:
    """The records of ``incidents`` for one pass that keeps few of them: records read from a start snapshot are
    then validated for the pass and not kept (:meth:`start_snapshot.RecordParts.scan`); others are the mapping's."""
    if isinstance(incidents, start_snapshot.RecordParts | OverlaidRecords):
        return incidents.scan()
    return iter(incidents.values())


def read_yaml(path: Path) -> object:
    with path.open("rb") as handle:
        return yaml.load(handle, Loader=YAML_LOADER)


def load_library(root: Path | str, cache_dir: Path | None = None) -> LibraryData:
    """Load and validate ``root``; raise :class:`LibraryError` listing every problem.

    With ``cache_dir``, the parsed YAML is reused from there when the data files' bytes are the same
    (see :mod:`incidentlib.parsed_cache`); the records and problems are the same either way."""
    data, problems = check_library(root, cache_dir)
    if problems or data is None:
        raise LibraryError(problems)
    return data


def check_library(root: Path | str, cache_dir: Path | None = None, *, written: Mapping[str, object] | None = None,
                  ) -> tuple[LibraryData | None, list[Problem]]:
    """Validate ``root`` and return what loaded together with all problems found (``cache_dir``: as in
    :func:`load_library`).  The cyclic collector is paused meanwhile (:mod:`incidentlib.gc_pause`).

    ``written``: files this process has just written by dumping a document (name relative to ``root`` → that
    document), taken as what parsing them gives instead of parsing them again (an import checks the library with
    its new records so); never with ``cache_dir``, whose parse cache must hold what was parsed.  For a record the
    document may be the :class:`Incident` itself, validated by the caller, whose file was dumped from it: it is taken
    as what validating the file gives (a dumped record validates to an equal incident: tests/test_import.py).  A
    :class:`~incidentlib.parsed_cache.WrittenFile` gives the file's bytes as well, which are then not read back."""
    if written and cache_dir is not None:
        raise ValueError("check_library: documents taken as written are not kept in a parse cache")
    with collector_paused():
        return _check_library(Path(root), cache_dir, written or {})


def _check_library(root: Path, cache_dir: Path | None, written: Mapping[str, object],
                   ) -> tuple[LibraryData | None, list[Problem]]:
    problems: list[Problem] = []
    recover(root)  # finish or undo an import that was interrupted (see incidentlib.journal)
    if not root.is_dir():
        # a file given as --data is most often an export meant for `incidentlib import`
        said = ("a file, not a library directory (to read an export into a library: incidentlib import FILE --into DIR)"
                if root.is_file() else "library directory does not exist")
        return None, [Problem(file=str(root), message=said)]
    for sub in (VOCAB_DIR, INCIDENTS_DIR):
        if not (root / sub).is_dir():
            problems.append(Problem(file=str(root / sub), message="missing folder"))
    if problems:
        return None, problems

    remembered: file_memo.FileHashes | None = None
    if cache_dir is not None:  # unchanged files need not be read when the start snapshot answers (file_memo)
        remembered = file_memo.recall(cache_dir, root, _data_file_names(root))
        if remembered is not None:
            found = _from_snapshot(root, cache_dir, remembered)
            if found is not None:
                return found, []
    files = DataFiles.read(root, _data_files(root), cache_dir, written=written)
    if cache_dir is not None and files.key is not None:
        hashes = file_memo.FileHashes(files.key, files.content_hash())
        found = None if hashes == remembered else _from_snapshot(root, cache_dir, hashes)  # not the same miss twice
        if found is not None:
            file_memo.remember(cache_dir, root, files.signatures_by_name(), hashes)
            return found, []
    sharer = FieldSetSharer()  # each record shares its fields sets as it is made (incidentlib.field_sets)
    concepts = _load_vocab(root, problems, files)
    sharer.share(concepts)
    vocab = Vocabulary(concepts)
    _check_vocab_links(root, vocab, problems)
    misshapen: list[tuple[str, dict[str, Any], set[str]]] = []
    incidents = _load_incidents(root, problems, files, sharer, misshapen)
    # a record of the wrong shape is still there: links to it are not "unknown", and its own references are checked
    present = set(incidents) | {doc["id"] for _, doc, _ in misshapen if isinstance(doc.get("id"), str)}
    _check_incident_links(root, incidents, vocab, problems, present)
    for file, doc, reported in misshapen:
        problems.extend(_raw_reference_problems(file, doc, present, vocab, reported))
    digest = files.content_hash()  # the bytes just parsed, not a second read that could see a newer file
    files.save()
    key = snapshot_key(files.key) if cache_dir is not None and files.key is not None else None
    if key is not None and not problems:
        assert cache_dir is not None and files.key is not None
        file_memo.remember(cache_dir, root, files.signatures_by_name(), file_memo.FileHashes(files.key, digest))
    return LibraryData(root=root, vocab=vocab, incidents=incidents, content_hash=digest,
                       snapshot_key=None if problems else key), problems


def _from_snapshot(root: Path, cache_dir: Path, hashes: file_memo.FileHashes) -> LibraryData | None:
    """The library from the start snapshot of the files ``hashes`` describe, or None when there is none (or it
    fails its checks)."""
    key = snapshot_key(hashes.files_key)
    snapshot = start_snapshot.load(cache_dir, key)
    if snapshot is None:
        return None
    # the same bytes through the same code: the same records, and no problem
    return LibraryData(root=root, vocab=Vocabulary(snapshot.concepts), incidents=snapshot.incidents,
                       content_hash=hashes.content_hash, snapshot_key=key, chunks=snapshot.chunks)


def content_hash(root: Path) -> str:
    """A hash of every data file's name and bytes: changes whenever the library does."""
    digest = hashlib.sha256()
    for path in sorted(_data_files(root)):
        if not path.is_file():
            continue  # reported as a problem by the loader
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _data_files(root: Path) -> Iterable[Path]:
    for sub in (VOCAB_DIR, INCIDENTS_DIR):
        yield from (root / sub).glob("*.yaml")
        yield from (root / sub).glob("*.yml")


def _data_file_names(root: Path) -> dict[str, str]:
    """The files :func:`_data_files` yields, by their name relative to ``root`` (``incidents/IL-0001.yaml``), with
    their paths as text: the same entries without a ``Path`` object each, which was most of listing 100k files."""
    found: dict[str, str] = {}
    for sub in (VOCAB_DIR, INCIDENTS_DIR):
        folder = os.path.join(root, sub)
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith((".yaml", ".yml")):  # pathlib's glob, unlike the shell's, matches hidden names too
                    found[f"{sub}/{name}"] = entry.path
    return found


def _rel(root: Path, path: Path) -> str:
    try:
        return relative_name(root, path)  # a string prefix, not PurePath.relative_to (seconds at 100k files)
    except ValueError:
        return str(path)


#: What a record's nested object holds, by its model's name, for messages that should not name our classes.
_SHAPES = {"Text": "an object with 'en' and/or 'ko' text", "BilingualText": "an object with 'en' and 'ko' text",
           "Source": "an object with url and title", "Signal": "a string or an object with text",
           "RelatedLink": "an object with id and reason", "InferredLink": "an object with concept, kind, evidence, "
           "method and confidence"}


def _pydantic_problems(file: str, exc: ValidationError, prefix: str = "") -> list[Problem]:
    found = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see docs/data-format.md)"
        elif error["type"] == "model_type":  # "a valid dictionary or instance of Text" names a class of ours
            message = f"expected {_SHAPES.get(str(error.get('ctx', {}).get('class_name')), 'an object of fields')}, " \
                      f"got {type(error.get('input')).__name__}"
        found.append(Problem(file=file, field=f"{prefix}{field}" if field else prefix or None, message=message))
    return found


def _load_vocab(root: Path, problems: list[Problem], data_files: DataFiles) -> list[Concept]:
    concepts: list[Concept] = []
    seen: dict[str, str] = {}
    kinds = {kind.value for kind in ConceptKind}
    files = sorted([*(root / VOCAB_DIR).glob("*.yaml"), *(root / VOCAB_DIR).glob("*.yml")])
    if not files:
        problems.append(Problem(file=_rel(root, root / VOCAB_DIR), message="no vocabulary files"))
    for path in files:
        file = _rel(root, path)
        if not path.is_file():
            problems.append(Problem(file=file, message=NOT_A_FILE))
            continue
        try:
            doc = data_files.load(path)
        except yaml.YAMLError as exc:
            problems.append(Problem(file=file, message=f"not valid YAML: {exc}"))
            continue
        except OSError as exc:
            problems.append(Problem(file=file, message=f"cannot be read: {exc.strerror or exc}"))
            continue
        if not isinstance(doc, dict):
            problems.append(Problem(file=file, message="expected a mapping with 'kind' and 'concepts'"))
            continue
        kind = doc.get("kind")
        if kind not in kinds:
            problems.append(Problem(file=file, field="kind", message=f"must be one of {sorted(kinds)}, got {kind!r}"))
            continue
        entries = doc.get("concepts")
        if not isinstance(entries, list):
            problems.append(Problem(file=file, field="concepts", message="must be a list"))
            continue
        for index, entry in enumerate(entries):
            prefix = f"concepts[{index}]."
            if not isinstance(entry, dict):
                problems.append(Problem(file=file, field=prefix.rstrip("."), message="must be a mapping"))
                continue
            try:
                concept = Concept(kind=kind, **entry)
            except ValidationError as exc:
                problems.extend(_pydantic_problems(file, exc, prefix))
                continue
            except TypeError as exc:
                problems.append(Problem(file=file, field=prefix.rstrip("."), message=str(exc)))
                continue
            if concept.id in seen:
                problems.append(
                    Problem(file=file, field=f"{prefix}id", message=f"duplicate concept id {concept.id!r} (also in {seen[concept.id]})")
                )
                continue
            seen[concept.id] = file
            concepts.append(concept)
    return concepts


def _check_vocab_links(root: Path, vocab: Vocabulary, problems: list[Problem]) -> None:
    for concept in vocab:
        if concept.broader is None:
            continue
        parent = vocab.get(concept.broader)
        file = f"{VOCAB_DIR}/ ({concept.kind.value} {concept.id})"
        if parent is None:
            problems.append(Problem(file=file, field="broader", message=f"unknown concept {concept.broader!r}{_did_you_mean(vocab.suggest(concept.broader, concept.kind))}"))
        elif parent.kind != concept.kind:
            problems.append(Problem(file=file, field="broader", message=f"{concept.broader!r} is a {parent.kind.value}, not a {concept.kind.value}"))
        elif concept.id in vocab.ancestors(concept.broader):
            problems.append(Problem(file=file, field="broader", message="broader links form a cycle"))


def _load_incidents(root: Path, problems: list[Problem], files: DataFiles, sharer: FieldSetSharer,
                    misshapen: list[tuple[str, dict[str, Any], set[str]]] | None = None) -> dict[str, Incident]:
    """The valid incidents; a document of the wrong shape goes to ``misshapen`` with the fields already reported.

    A record ``check_library`` was given as written (an :class:`Incident` its caller validated and dumped, see
    :func:`check_library`) is taken as it is: it is not validated a second time."""
    incidents: dict[str, Incident] = {}
    where: dict[str, str] = {}
    folder = root / INCIDENTS_DIR
    # sorted by their text: the order of the paths within one folder, without PurePath.__lt__
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")], key=str):
        file = _rel(root, path)
        if path not in files.files and not path.is_file():  # the files read are regular files, stat'ed then
            problems.append(Problem(file=file, message=NOT_A_FILE))
            continue
        try:
            doc = files.load(path)
        except yaml.YAMLError as exc:
            problems.append(Problem(file=file, message=f"not valid YAML: {exc}"))
            continue
        except OSError as exc:
            problems.append(Problem(file=file, message=f"cannot be read: {exc.strerror or exc}"))
            continue
        if isinstance(doc, Incident):
            incident = doc
        elif not isinstance(doc, dict):
            problems.append(Problem(file=file, message="expected a mapping of incident fields"))
            continue
        else:
            try:
                incident = Incident.model_validate(doc)
            except ValidationError as exc:
                shape = _pydantic_problems(file, exc)
                problems.extend(shape)
                if misshapen is not None:
                    misshapen.append((file, doc, _reported_fields(shape)))
                continue
            sharer.share((incident,))
        if path.stem != incident.id:
            problems.append(Problem(file=file, field="id", message=f"id {incident.id!r} does not match the file name {path.name!r}"))
        if incident.id in incidents:
            problems.append(Problem(file=file, field="id", message=f"duplicate incident id {incident.id!r} (also in {where[incident.id]})"))
            continue
        incidents[incident.id] = incident
        where[incident.id] = file
    return dict(sorted(incidents.items()))


def _check_incident_links(root: Path, incidents: dict[str, Incident], vocab: Vocabulary, problems: list[Problem],
                          present: Collection[str] | None = None) -> None:
    for incident in incidents.values():
        check_texts(f"{INCIDENTS_DIR}/{incident.id}.yaml", incident, problems)
        check_references(f"{INCIDENTS_DIR}/{incident.id}.yaml", incident, incidents if present is None else present,
                         vocab, problems)


def _reported_fields(shape: list[Problem]) -> set[str]:
    """The top-level fields that shape problems name (``components[1]`` names ``components``)."""
    return {re.split(r"[.\[]", problem.field, maxsplit=1)[0] for problem in shape if problem.field}


def check_references(file: str, incident: Incident, incident_ids: Collection[str], vocab: Vocabulary,
                     problems: list[Problem]) -> None:
    """Append to ``problems`` every concept or related-incident reference of ``incident`` that does not resolve."""
    for field, kind in REFERENCE_FIELDS.items():
        _check_concept_ids(file, field, getattr(incident, field), kind, vocab, problems)
    for index, suggestion in enumerate(incident.suggestions):
        concept = vocab.get(suggestion.concept)
        if concept is None or concept.kind != suggestion.kind:
            problems.append(Problem(file=file, field=f"suggestions[{index}].concept",
                                    message=f"unknown {suggestion.kind.value} {suggestion.concept!r}{_did_you_mean(vocab.suggest(suggestion.concept, suggestion.kind))}"))
    for index, inferred in enumerate(incident.inferred):
        concept = vocab.get(inferred.concept)
        if concept is None or concept.kind != inferred.kind:
            problems.append(Problem(file=file, field=f"inferred[{index}].concept",
                                    message=f"unknown {inferred.kind.value} {inferred.concept!r}{_did_you_mean(vocab.suggest(inferred.concept, inferred.kind))}"))
    for index, link in enumerate(incident.related):
        if link.id not in incident_ids:
            problems.append(Problem(file=file, field=f"related[{index}].id", message=f"unknown incident {link.id!r}{_did_you_mean(difflib.get_close_matches(link.id, list(incident_ids), n=3, cutoff=0.5))}"))
        elif link.id == incident.id:
            problems.append(Problem(file=file, field=f"related[{index}].id", message="an incident cannot relate to itself"))


def _check_concept_ids(file: str, field: str, value: str | list[str], kind: ConceptKind, vocab: Vocabulary,
                       problems: list[Problem]) -> None:
    values = [value] if isinstance(value, str) else value
    for index, concept_id in enumerate(values):
        concept = vocab.get(concept_id)
        label = field if isinstance(value, str) else f"{field}[{index}]"
        if concept is None:
            problems.append(Problem(file=file, field=label, message=f"unknown {kind.value} {concept_id!r}{_did_you_mean(vocab.suggest(concept_id, kind))}"))
        elif concept.kind != kind:
            problems.append(Problem(file=file, field=label, message=f"{concept_id!r} is a {concept.kind.value}, not a {kind.value}"))
    if not isinstance(value, str) and len(set(values)) != len(values):
        problems.append(Problem(file=file, field=field, message="lists the same id twice"))


def _raw_reference_problems(file: str, doc: dict[str, Any], incident_ids: Collection[str], vocab: Vocabulary,
                            reported: set[str]) -> list[Problem]:
    """The reference problems of a document whose shape is wrong elsewhere (a bad date), read from its raw fields,
    so every problem is named at once; a field whose own shape is wrong is left to the shape's message."""
    problems: list[Problem] = []
    for field, kind in REFERENCE_FIELDS.items():
        value = doc.get(field)
        if field in reported or value is None:
            continue
        if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            _check_concept_ids(file, field, value, kind, vocab, problems)
    related = doc.get("related")
    if "related" not in reported and isinstance(related, list):
        for index, link in enumerate(related):
            target = link.get("id") if isinstance(link, dict) else None
            if isinstance(target, str) and target not in incident_ids:
                problems.append(Problem(file=file, field=f"related[{index}].id", message=f"unknown incident {target!r}{_did_you_mean(difflib.get_close_matches(target, list(incident_ids), n=3, cutoff=0.5))}"))
    return problems


def check_incident(file: str, doc: object, incident_ids: Collection[str], vocab: Vocabulary) -> tuple[Incident | None, list[Problem]]:
    """Validate one incident document by the rules of ``incidentlib validate`` (shape, then references; the
    references are checked from the raw fields when the shape is wrong, so every problem is named at once)."""
    if not isinstance(doc, dict):
        return None, [Problem(file=file, message="expected a mapping of incident fields")]
    try:
        incident = Incident.model_validate(doc)
    except ValidationError as exc:
        shape = _pydantic_problems(file, exc)
        return None, shape + _raw_reference_problems(file, doc, incident_ids, vocab, _reported_fields(shape))
    problems: list[Problem] = []
    check_texts(file, incident, problems)
    check_references(file, incident, incident_ids, vocab, problems)
    return incident, problems


#: The texts of an incident that are read, searched and compared, by field.
_TEXT_FIELDS = ("title", "summary", "body", "detection", "mitigation")


def check_texts(file: str, incident: Incident, problems: list[Problem]) -> None:
    """Append to ``problems`` every language of a text that holds only spaces: such a record says nothing, and
    there is nothing of it to search or compare (a language with no text is left out instead)."""
    texts = [(name, getattr(incident, name)) for name in _TEXT_FIELDS]
    texts += [(f"lessons[{n}]", lesson) for n, lesson in enumerate(incident.lessons)]
    texts += [(f"signals[{n}].note", signal.note) for n, signal in enumerate(incident.signals)]
    for name, text in texts:
        for lang in LANGS:
            value = getattr(text, lang, None) if text is not None else None
            if value is not None and not value.strip():
                problems.append(Problem(file=file, field=f"{name}.{lang}",
                                        message="blank text (only spaces): write the text, or leave the language out"))


def _did_you_mean(close: list[str]) -> str:
    if not close:
        return ""
    return " (did you mean " + ", ".join(repr(c) for c in close) + "?)"
