"""Split incidents into the passages that get embedded and indexed.

Per incident and per language present:

- ``title``: title and summary together;
- ``body``: each paragraph of the narrative;
- ``detail``: detection, mitigation and lessons;
- ``concepts``: the labels and aliases of its components, causes and symptoms
  (so a Korean query can meet an English-only incident through the vocabulary);

and one ``signal`` chunk per verbatim error string (language ``raw``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..models import LANGS, Incident
from ..vocab import Vocabulary

ChunkKind = Literal["title", "body", "detail", "concepts", "signal"]

_PARAGRAPH = re.compile(r"\n\s*\n")
# Longest chunk text, split at sentence ends above it.  A cap chosen by hand, not tuned, and not derived
# from the models' input limits: no paragraph in the bundled library is longer (the longest has 1,095
# characters; 99% of the 1,768 chunks are under 1,050), so today it splits only five texts, four English
# concept lists and one detail section (IL-0025, IL-0054, IL-0078, IL-0126).
MAX_CHUNK_CHARS = 1200


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed passage.

    A slotted dataclass, not a pydantic model: a library of 100k incidents holds about 1.35M of
    them, and a model instance carries about 0.9 KB of per-object bookkeeping (its ``__dict__``,
    fields-set and private slots) where this one carries 0.1 KB.  Chunks are made only by
    :func:`incident_chunks` from validated incidents, so there is nothing left to validate."""

    id: str
    incident_id: str
    kind: ChunkKind
    lang: str
    text: str
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """``sha256(id \\0 text)``, 16 hex digits: what identifies the chunk's vector in every index.

        Computed once, on first use (a store load asks for every chunk's)."""
        digest = self._digest
        if digest is None:
            digest = hashlib.sha256(f"{self.id}\0{self.text}".encode()).hexdigest()[:16]
            # the one write to a frozen chunk: a cache of a pure function of its fields
            object.__setattr__(self, "_digest", digest)
        return digest



class StoredChunk(Chunk):
    """A chunk whose text stays where it was stored (the start snapshot's mapped file) until it is read.

    At 100k incidents the 1.35M chunk texts are about 0.7 GB of strings that a server otherwise holds all the
    time, while it reads them only to show a result's passage or to rebuild an index. This one holds its row
    in a shared text column instead, and makes its text on each read; everything else is a :class:`Chunk`'s
    (the same fields, digest, equality and hash, and it pickles as a plain chunk)."""

    __slots__ = ("_row", "_texts")
    _row: int
    _texts: Sequence[str]

    def __init__(self, id: str, incident_id: str, kind: ChunkKind, lang: str,
                 texts: Sequence[str], row: int, digest: str) -> None:
        set_field = object.__setattr__
        set_field(self, "id", id)
        set_field(self, "incident_id", incident_id)
        set_field(self, "kind", kind)
        set_field(self, "lang", lang)
        set_field(self, "_texts", texts)
        set_field(self, "_row", row)
        set_field(self, "_digest", digest)

    @property
    def text(self) -> str:
        return self._texts[self._row]

    def _fields(self) -> tuple[str, str, str, str, str]:
        return (self.id, self.incident_id, self.kind, self.lang, self.text)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return self._fields() == (other.id, other.incident_id, other.kind, other.lang, other.text)

    def __hash__(self) -> int:
        return hash(self._fields())  # what the dataclass's hash of the same fields gives

    def __reduce__(self) -> tuple[type[Chunk], tuple[str, str, str, str, str]]:
        return (Chunk, self._fields())

def _split_long(text: str) -> list[str]:
    """Keep chunks under ``MAX_CHUNK_CHARS`` by splitting on sentence ends."""
    if len(text) <= MAX_CHUNK_CHARS:
        return [text]
    parts, current = [], ""
    for sentence in re.split(r"(?<=[.!?다,])\s+", text):
        if current and len(current) + len(sentence) > MAX_CHUNK_CHARS:
            parts.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        parts.append(current)
    return parts


_SENTENCE_END = (".", "!", "?", "…", "。")


def title_passage(title: str, summary: str) -> str:
    """``"title. summary"``: one period between them (none added after a title that ends a sentence),
    and the summary left out when it repeats the title (imported drafts derive one from the other)."""
    title, summary = title.strip(), summary.strip()
    if not title or summary == title or summary.startswith(title):
        return summary or title
    if not summary:
        return title
    return f"{title}{' ' if title.endswith(_SENTENCE_END) else '. '}{summary}"


def incident_chunks(incident: Incident, vocab: Vocabulary) -> list[Chunk]:
    chunks: list[Chunk] = []

    def add(kind: ChunkKind, lang: str, text: str, index: int = 0) -> None:
        text = " ".join(text.split())
        for part, piece in enumerate(_split_long(text) if text else []):
            suffix = f"{index}" if part == 0 else f"{index}.{part}"
            chunks.append(Chunk(id=f"{incident.id}/{kind}/{lang}/{suffix}", incident_id=incident.id, kind=kind, lang=lang, text=piece))

    for lang in LANGS:
        # only the languages the incident is written in: an English-only draft has no ko title passage
        add("title", lang, title_passage(incident.title.get(lang, fallback=False), incident.summary.get(lang, fallback=False)))
        body = getattr(incident.body, lang)
        if body:
            for index, paragraph in enumerate(p for p in _PARAGRAPH.split(body) if p.strip()):
                add("body", lang, paragraph, index)
        detail = [
            getattr(incident.detection, lang, None) if incident.detection else None,
            getattr(incident.mitigation, lang, None) if incident.mitigation else None,
            *(getattr(lesson, lang, None) for lesson in incident.lessons),
        ]
        add("detail", lang, " ".join(d for d in detail if d))
        names: list[str] = []
        for concept_id in [*incident.components, *incident.causes, *incident.symptoms]:
            concept = vocab.get(concept_id)
            if concept is not None:
                names.append(concept.label.get(lang))
                names.extend(concept.alt.get(lang))
        add("concepts", lang, ", ".join(dict.fromkeys(names)))
    for index, signal in enumerate(incident.signals):
        add("signal", "raw", signal.text, index)
    return chunks


#: Chunks of each incident by id, with the incident object and vocabulary they were cut from.
ChunkMemo = dict[str, tuple[Incident, Vocabulary, list[Chunk]]]


def library_chunks(incidents: Iterable[Incident], vocab: Vocabulary, memo: ChunkMemo | None = None) -> list[Chunk]:
    """Every incident's chunks, in order.  With ``memo`` (filled here), an incident that is the very object
    (and vocabulary) the memo holds reuses its chunks: after a write to a live library only the changed
    incidents are new objects (``store.live.patched``), so only they are cut again."""
    if memo is None:
        return [chunk for incident in incidents for chunk in incident_chunks(incident, vocab)]
    previous = dict(memo)
    memo.clear()
    result: list[Chunk] = []
    for incident in incidents:
        known = previous.get(incident.id)
        chunks = known[2] if known is not None and known[0] is incident and known[1] is vocab else incident_chunks(incident, vocab)
        memo[incident.id] = (incident, vocab, chunks)
        result.extend(chunks)
    return result
