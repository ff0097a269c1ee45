"""Split incidents into the passages that get embedded and indexed.

Per incident and per language present:

- ``title``: title and summary together;
- ``body``: each paragraph of the narrative;
- ``detail``: detection, mitigation and lessons;
- ``concepts``: the labels and aliases of its organisation, components, causes and symptoms
  (so a Korean query can meet an English-only incident through the vocabulary);

and one ``signal`` chunk per verbatim error string (language ``raw``).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..models import LANGS, Incident
from ..row_sequence import RowSequence, SplicedRows
from ..vocab import Vocabulary

ChunkKind = Literal["title", "body", "detail", "concepts", "signal"]
#: The ``lang`` of a ``signal`` chunk: a log line or error string quoted verbatim, as the system printed it, which is
#: in neither of the library's languages (it is the same text whichever language is asked for).
RAW_LANG = "raw"

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

class ChunkTable(RowSequence[Chunk]):
    """Chunks kept as columns (the start snapshot's), each made as a :class:`StoredChunk` when it is read.

    At 100k incidents, making the 1.35M chunk objects of a start took 3 s of its decoding and the engine's first
    passes over them (every chunk's id and digest for the index key, its incident for the grouping, the title
    chunks) 3 s more; a server reads a handful of chunks per answer.  The columns are plain lists sharing their
    strings (one incident id, kind and language object for all the chunks that have it), and the passes that need
    one field of every chunk read its column (:func:`chunk_ids`, :func:`chunk_digests`, :func:`chunk_incident_ids`,
    :func:`chunk_texts`).  Equal to any sequence of the same chunks in the same order."""

    __slots__ = ("digests", "ids", "incident_ids", "kinds", "langs", "texts")

    def __init__(self, ids: Sequence[str], incident_ids: Sequence[str], kinds: Sequence[str], langs: Sequence[str],
                 digests: Sequence[str], texts: Sequence[str]) -> None:
        if not len(ids) == len(incident_ids) == len(kinds) == len(langs) == len(digests) == len(texts):
            raise ValueError("the chunk columns differ in length")
        self.ids, self.incident_ids, self.kinds, self.langs = ids, incident_ids, kinds, langs
        self.digests, self.texts = digests, texts

    def __len__(self) -> int:
        return len(self.ids)

    def _row(self, row: int) -> Chunk:
        return StoredChunk(self.ids[row], self.incident_ids[row], self.kinds[row],  # type: ignore[arg-type]
                           self.langs[row], self.texts, row, self.digests[row])

    def __iter__(self) -> Iterator[Chunk]:
        return map(StoredChunk, self.ids, self.incident_ids, self.kinds, self.langs, itertools.repeat(self.texts),
                   itertools.count(), self.digests)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable columns, as a list


def chunk_ids(chunks: Sequence[Chunk]) -> Sequence[str]:
    """Every chunk's id, in order: a :class:`ChunkTable`'s column, else read from each chunk."""
    return chunks.ids if isinstance(chunks, ChunkTable) else [chunk.id for chunk in chunks]


def chunk_digests(chunks: Sequence[Chunk]) -> Sequence[str]:
    """Every chunk's text digest, in order (as :func:`chunk_ids`)."""
    return chunks.digests if isinstance(chunks, ChunkTable) else [chunk.digest for chunk in chunks]


def chunk_incident_ids(chunks: Sequence[Chunk]) -> Sequence[str]:
    """Every chunk's incident id, in order (as :func:`chunk_ids`)."""
    return chunks.incident_ids if isinstance(chunks, ChunkTable) else [chunk.incident_id for chunk in chunks]


def chunk_kinds(chunks: Sequence[Chunk]) -> Sequence[str]:
    """Every chunk's kind, in order (as :func:`chunk_ids`)."""
    return chunks.kinds if isinstance(chunks, ChunkTable) else [chunk.kind for chunk in chunks]


def chunk_texts(chunks: Sequence[Chunk]) -> Sequence[str]:
    """Every chunk's text, in order, read when asked (a list of them all would hold about 0.7 GB at 100k incidents):
    a :class:`ChunkTable`'s text column, else a view reading each chunk's."""
    return chunks.texts if isinstance(chunks, ChunkTable) else _ChunkTexts(chunks)


class _ChunkTexts(RowSequence[str]):
    """The texts of ``chunks``, read from each chunk when asked."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self._chunks = chunks

    def __len__(self) -> int:
        return len(self._chunks)

    def _row(self, row: int) -> str:
        return self._chunks[row].text


class IncidentChunks(Mapping[str, Sequence[Chunk]]):
    """Each incident's chunks (id order) as runs of one :class:`ChunkTable`: ``table``, with ``counts[i]`` chunks for
    incident ``ids[i]``; an incident's list of chunks is made when it is read."""

    def __init__(self, table: ChunkTable, ids: Sequence[str], counts: Sequence[int]) -> None:
        if len(ids) != len(counts) or sum(counts) != len(table):
            raise ValueError("the chunk counts differ from the incidents or the chunks")
        self.table = table
        self._ids = ids
        starts = list(itertools.accumulate(counts, initial=0))
        self._runs = {incident_id: (start, stop) for incident_id, start, stop in zip(ids, starts[:-1], starts[1:], strict=True)}

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __contains__(self, key: object) -> bool:
        return key in self._runs

    def __getitem__(self, incident_id: str) -> list[Chunk]:
        start, stop = self._runs[incident_id]
        return self.table[start:stop]


def patched_chunks(chunks: IncidentChunks, ids: Sequence[str], changed: Mapping[str, Sequence[Chunk]]) -> IncidentChunks:
    """Each incident of ``ids`` (the incidents after a change, in order) with its chunks: ``changed[i]`` for an incident
    changed or added, else its run of ``chunks``, which must hold every other one.  The table's columns are the
    previous ones spliced (:class:`~incidentlib.row_sequence.SplicedRows`): no chunk kept is made or copied, so a
    write to a library of 100k incidents cuts only its own incidents' chunks and reads no other record."""
    table = chunks.table
    pieces: list[range | list[Chunk]] = []
    counts: list[int] = []
    for incident_id in ids:
        new = changed.get(incident_id)
        if new is not None:
            pieces.append(list(new))
            counts.append(len(new))
        else:
            start, stop = chunks._runs[incident_id]
            pieces.append(range(start, stop))
            counts.append(stop - start)

    def column(values: Sequence[str], field: Callable[[Chunk], str]) -> SplicedRows[str]:
        return SplicedRows(values, [piece if isinstance(piece, range) else [field(c) for c in piece] for piece in pieces])

    spliced = ChunkTable(column(table.ids, lambda c: c.id), column(table.incident_ids, lambda c: c.incident_id),
                         column(table.kinds, lambda c: c.kind), column(table.langs, lambda c: c.lang),
                         column(table.digests, lambda c: c.digest), column(table.texts, lambda c: c.text))
    return IncidentChunks(spliced, list(ids), counts)


def _split_long(text: str) -> list[str]:
    """Keep chunks under ``MAX_CHUNK_CHARS`` by splitting on sentence ends, and a sentence longer than that between
    words (a pasted log or table has no sentence end for pages)."""
    if len(text) <= MAX_CHUNK_CHARS:
        return [text]
    parts, current = [], ""
    for sentence in re.split(r"(?<=[.!?다,])\s+", text):
        for piece in _words_within(sentence):
            if current and len(current) + 1 + len(piece) > MAX_CHUNK_CHARS:  # 1: the space that would join them
                parts.append(current)
                current = piece
            else:
                current = f"{current} {piece}".strip()
    if current:
        parts.append(current)
    return parts


def _words_within(sentence: str) -> Iterator[str]:
    """``sentence`` in pieces of at most ``MAX_CHUNK_CHARS``, cut at the last space that fits (a word longer than
    that, such as a base64 blob, is cut where the limit falls)."""
    while len(sentence) > MAX_CHUNK_CHARS:
        cut = sentence.rfind(" ", 0, MAX_CHUNK_CHARS + 1)
        if cut <= 0:
            cut = MAX_CHUNK_CHARS
        yield sentence[:cut].strip()
        sentence = sentence[cut:].strip()
    if sentence:
        yield sentence


_SENTENCE_END = (".", "!", "?", "…", "。")
_LEADS_IN = (":", ";", ",", "-", "–", "—")  # a line ending so continues into the next
#: What may follow a sentence's last mark and still end it: a closing bracket, quote or Markdown emphasis.
_CLOSERS = ")]}\"'’”*_`"


def is_heading(paragraph: str) -> bool:
    """A paragraph of one line that ends no sentence: a title (``Cloudflare outage, July 2 2019``), a section heading
    (``Root cause``, ``Timeline:``) or a label; it names what follows rather than saying something itself."""
    line = paragraph.strip()
    return bool(line) and "\n" not in line and not line.rstrip(_CLOSERS).endswith(_SENTENCE_END)


def _under_heading(heading: str, paragraph: str) -> str:
    """A heading and the paragraph after it: as a title and its summary (:func:`title_passage`), except that a heading
    that leads into the paragraph (``Timeline:``, ``Impact —``) takes no period."""
    if heading.endswith(_LEADS_IN):
        return f"{heading} {paragraph}"
    return title_passage(heading, paragraph)


def pasted_passages(text: str, strip: Callable[[str], str] = str) -> list[str]:
    """Pasted text (a write-up, a log excerpt) in the passages a record of the same text is embedded in.

    Paragraphs, each with ``strip`` applied (the collection's boilerplate removed), split when long
    (:data:`MAX_CHUNK_CHARS`), as a record's body is.  A heading (:func:`is_heading`) is read with the paragraph after
    it, joined as a record's title is joined with its summary (:func:`title_passage`): a record's first passage is
    its title and summary together, and a pasted write-up that opens with its title line is then matched passage for
    passage instead of by a title alone, which names an organisation and a date more often than anything that
    happened.  A heading with nothing after it stays a passage.  No passage at all (the whole text was boilerplate):
    the text itself, whitespace folded."""
    pieces: list[str] = []
    heading = ""
    for paragraph in _PARAGRAPH.split(text):
        stripped = strip(" ".join(paragraph.split()))
        if not stripped.strip():
            continue
        joined = _under_heading(heading, stripped) if heading else stripped
        heading = ""
        if is_heading(paragraph):
            heading = joined
            continue
        pieces.extend(p for p in _split_long(joined) if p.strip())
    if heading:
        pieces.extend(p for p in _split_long(heading) if p.strip())
    return pieces or [" ".join(text.split())]


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
        # the organisation first: its name in this language (클라우드플레어) meets records that write it in the other
        for concept_id in [incident.org, *incident.components, *incident.causes, *incident.symptoms]:
            concept = vocab.get(concept_id)
            if concept is not None:
                names.append(concept.label.get(lang))
                names.extend(concept.alt.get(lang))
        add("concepts", lang, ", ".join(dict.fromkeys(names)))
    for index, signal in enumerate(incident.signals):
        add("signal", RAW_LANG, signal.text, index)
    return chunks


#: Chunks of each incident by id, with the incident object and vocabulary they were cut from.
ChunkMemo = dict[str, tuple[Incident, Vocabulary, Sequence[Chunk]]]


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
