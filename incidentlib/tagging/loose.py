"""A concept's name written with one modifier inside it: "bad *firewall* config", "incorrect *MySQL* configuration".

Writers qualify a name from the middle as often as they write it whole: the name "bad config" is read in "a bad
firewall config" by anyone who knows it. :class:`LooseNames` finds a Latin name of two or more words whose words are
written in order with at most one word between two of them, when that word is a content word. A function word
between them (and, or, of, to, the, …) joins two phrases rather than qualifying one ("kernel and driver" is not a
"kernel driver", "network and storage" not "network storage"), so it never stands in a gap.

Only what the exact recogniser (:class:`~incidentlib.search.concepts.ConceptRecognizer`) did not find is looked for.
The tagger proposes these links with their own method, ``loose-alias`` (``LOOSE_ALIAS_CONFIDENCE`` in :mod:`.tagger`),
so a reviewer sees how they were found; search keeps matching names only as written.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from ..models import ConceptKind
from ..search.concepts import CASE_SENSITIVE_BELOW, FOLD_CHARS, plural_ending
from ..vocab import Vocabulary

#: Words that join or frame phrases rather than qualify a noun; one of them between two words of a name means the
#: words belong to different phrases.
FUNCTION_WORDS = frozenset({
    "a", "an", "the", "and", "or", "nor", "but", "if", "then", "than", "as", "at", "by", "for", "from", "in",
    "into", "of", "off", "on", "onto", "out", "over", "per", "to", "up", "via", "with", "without", "is", "are",
    "was", "were", "be", "been", "being", "has", "have", "had", "do", "does", "did", "not", "no", "this", "that",
    "these", "those", "its", "it", "their", "our", "your", "his", "her", "we", "they", "he", "she", "i", "you",
    "which", "who", "whom", "whose", "what", "when", "where", "while", "after", "before", "during", "because", "so",
    "such", "all", "any", "each", "both", "either", "neither", "some", "many", "more", "most", "other", "another",
    "same", "only", "very", "too", "also", "just", "can", "could", "may", "might", "must", "shall", "should",
    "will", "would",
})
KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom)
#: One word between two words of a name: it starts with a letter or digit and holds no sentence punctuation.
_GAP = r"(?:\s+(?!(?:{function})(?![\w\-/']))[A-Za-z0-9][\w\-/']*)?\s+"
_WORD = re.compile(r"[a-z0-9_]+")


def _anchored(pattern: re.Pattern[str], text: str, lowered: str, first: str) -> Iterator[re.Match[str]]:
    """The pattern's matches that start where ``first`` occurs in ``lowered`` (offsets shared with ``text``)."""
    start = lowered.find(first)
    while start >= 0:
        match = pattern.match(text, start)  # the lookbehind still sees text[start - 1]
        if match:
            yield match
        start = lowered.find(first, start + 1)


@dataclass(frozen=True)
class LooseMatch:
    concept_id: str
    kind: str
    name: str  # the vocabulary name whose words matched
    start: int
    end: int


@dataclass(frozen=True)
class _Entry:
    name: str
    concept_id: str
    kind: str
    words: frozenset[str]  # the name's words (as ``_WORD`` reads the lowercased name), all needed in the text
    last: str  # the name's last word, which may carry a plural ending
    first: str  # the name's first whitespace-separated part, lowercased: where a match starts


class LooseNames:
    """``find(text, skip)``: names written with one modifier inside, per concept not in ``skip``, first match each."""

    def __init__(self, vocab: Vocabulary) -> None:
        gap = _GAP.format(function="|".join(sorted(FUNCTION_WORDS, key=len, reverse=True)))
        entries: list[_Entry] = []
        self._patterns: list[re.Pattern[str]] = []
        for kind in KINDS:
            for concept in vocab.of_kind(kind):
                for name in dict.fromkeys(n for n in concept.names() if n):
                    parts = name.split()
                    if len(parts) < 2 or not name.isascii() or len(name) < CASE_SENSITIVE_BELOW:
                        continue
                    words = _WORD.findall(name.lower())
                    if not words:
                        continue
                    ending, written_case = plural_ending(name, kind.value)
                    body = gap.join(re.escape(part) for part in parts)
                    # a name in capitals (GPU, SAN) takes its plural only as written, so loosely none
                    tail = "" if written_case else ending
                    self._patterns.append(re.compile(rf"(?i)(?<![A-Za-z0-9_]){body}{tail}(?![A-Za-z0-9_])"))
                    entries.append(_Entry(name, concept.id, kind.value, frozenset(words), words[-1], parts[0].lower()))
        # longer names first, as the exact recogniser credits them
        order = sorted(range(len(entries)), key=lambda i: -len(entries[i].name))
        self._entries = [entries[i] for i in order]
        self._patterns = [self._patterns[i] for i in order]
        self._by_first: dict[str, list[int]] = defaultdict(list)
        for position, entry in enumerate(self._entries):
            self._by_first[_WORD.findall(entry.name.lower())[0]].append(position)

    def _first_match(self, position: int, text: str, lowered: str) -> re.Match[str] | None:
        """The name's first loose match: tried only where its first word starts (a search of the whole text with
        the pattern's lookbehind costs a step at every character), unless lowercasing changed the text's length
        and so its offsets."""
        entry, pattern = self._entries[position], self._patterns[position]
        words_in_name = len(entry.name.split())
        if len(lowered) != len(text):
            candidates: Iterator[re.Match[str]] = pattern.finditer(text)
        else:
            candidates = _anchored(pattern, text, lowered, entry.first)
        for match in candidates:
            # a match without a word inside is the name as written, which the exact recogniser reads
            if len(match.group(0).split()) > words_in_name:
                return match
        return None

    def find(self, text: str, skip: set[str] | frozenset[str] = frozenset()) -> list[LooseMatch]:
        """Each concept not in ``skip`` whose name matches loosely, with a word inside, once (its first name in
        priority order that does, at that name's first such match)."""
        if FOLD_CHARS.search(text):
            return self.reference_find(text, skip)  # a character that case-insensitive matching folds unlike lower()
        lowered = text.lower()
        present = set(_WORD.findall(lowered))
        plural_stems = {w[:-2] for w in present if w.endswith("es")} | {w[:-1] for w in present if w.endswith("s")}
        candidates = sorted(p for first in self._by_first.keys() & present for p in self._by_first[first])
        found: dict[str, LooseMatch] = {}
        for position in candidates:  # in priority order
            entry = self._entries[position]
            if entry.concept_id in skip or entry.concept_id in found:
                continue
            if not entry.words - {entry.last} <= present or not (entry.last in present or entry.last in plural_stems):
                continue
            match = self._first_match(position, text, lowered)
            if match:
                found[entry.concept_id] = LooseMatch(entry.concept_id, entry.kind, entry.name, match.start(), match.end())
        return sorted(found.values(), key=lambda m: (m.start, m.concept_id))

    def reference_find(self, text: str, skip: set[str] | frozenset[str] = frozenset()) -> list[LooseMatch]:
        """``find`` the straightforward way: every name's pattern searched over the whole text, in priority order."""
        found: dict[str, LooseMatch] = {}
        for entry, pattern in zip(self._entries, self._patterns, strict=True):
            if entry.concept_id in skip or entry.concept_id in found:
                continue
            match = next((m for m in pattern.finditer(text) if len(m.group(0).split()) > len(entry.name.split())), None)
            if match:
                found[entry.concept_id] = LooseMatch(entry.concept_id, entry.kind, entry.name, match.start(), match.end())
        return sorted(found.values(), key=lambda m: (m.start, m.concept_id))
