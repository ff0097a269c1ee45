"""A concept's name written with one modifier inside it: "bad *firewall* config", "incorrect *MySQL* configuration".

Writers qualify a name from the middle as often as they write it whole: the name "bad config" is read in "a bad
firewall config" by anyone who knows it. :class:`LooseNames` finds a Latin name of two or more words whose words are
written in order with at most one word in each gap between two of them, when that word is a content word:

- a function word (and, or, of, to, the, …) joins two phrases rather than qualifying one ("kernel and driver" is not a
  "kernel driver", "network and storage" not "network storage"), so it never stands in a gap;
- the words are on one line: a title or a heading ends at its line break even without a full stop ("Bad deploy" over
  "Config drift…" is not a bad config);
- no word goes after a negating word of the name: a word there narrows what is denied ("no *backup* connectivity" is
  not "no connectivity").

Only what the exact recogniser (:class:`~incidentlib.search.concepts.ConceptRecognizer`) did not find is looked for.
The tagger proposes these links with their own method, ``loose-alias`` (``LOOSE_ALIAS_CONFIDENCE`` in :mod:`.tagger`),
so a reviewer sees how they were found; search keeps matching names only as written.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise

from ..models import INFERRED_KINDS
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
#: Words that deny what follows them in a name ("no connectivity"); no word is let in after them.
NEGATING_WORDS = frozenset({"no", "not", "non", "without", "never", "nor", "neither"})
#: Space within one line (any line or paragraph break ends a title or a heading that has no full stop).
_SPACE = r"[^\S\n\r\v\f\x85\u2028\u2029]+"
#: At most one word between two words of a name: it starts with a letter or digit, holds no sentence punctuation, and
#: is neither a function word, a negating word nor a negated verb ("wasn't"), in any case (the name's own words may
#: be case-sensitive). A possessive is a modifier ("mobile operator's core network").
_GAP = r"(?:{space}(?i:(?!(?:{function})(?![\w\-/']))(?![\w\-/]*n't(?![\w\-/']))[A-Za-z0-9][\w\-/']*))?{space}"
_BARRED_WORDS = "|".join(sorted(FUNCTION_WORDS | NEGATING_WORDS, key=len, reverse=True))
_FULL_GAP = _GAP.format(space=_SPACE, function=_BARRED_WORDS)
#: ``_GAP`` with any word in it, captured, for :class:`LooseNames` to check after the match (``_BARRED_GAP_WORD``).
#: A pattern holding the function words' alternation once per gap takes 5 ms to compile (a three-word name; 1-2 ms
#: without it), and an import meets a few hundred names: seconds in every process that tags.  A gap's word runs to
#: the space after it, so "is not a barred word" is the lookaheads of ``_GAP`` read on the captured word whole.
_OPEN_GAP = rf"(?:{_SPACE}(?i:([A-Za-z0-9][\w\-/']*)))?{_SPACE}"
_BARRED_GAP_WORD = re.compile(rf"(?i:(?:{_BARRED_WORDS})|[\w\-/]*n't)")
_WORD = re.compile(r"[a-z0-9_]+")


def _open_match(open_pattern: re.Pattern[str], strict: Callable[[], re.Pattern[str]], text: str,
                start: int) -> re.Match[str] | None:
    """``strict().match(text, start)``, by way of the name's ``_OPEN_GAP`` pattern: its first match at a start is
    the strict (``_GAP``) pattern's first when no word in its gaps is barred (the two try the same paths in the same
    order, the strict one skipping those with a barred word); else the strict pattern is matched there."""
    match = open_pattern.match(text, start)  # the lookbehind still sees text[start - 1]
    if match is None or not any(word is not None and _BARRED_GAP_WORD.fullmatch(word) for word in match.groups()):
        return match
    return strict().match(text, start)


def _every_start(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The pattern's matches at every start, overlapping ones included (``finditer`` would skip a match that starts
    inside an earlier one: a name whose first word recurs inside it)."""
    match = pattern.search(text)
    while match:
        yield match
        match = pattern.search(text, match.start() + 1)


def _with_a_word_inside(matches: Iterator[re.Match[str]], entry: _Entry) -> re.Match[str] | None:
    """The first match with a word inside: one without is the name as written, which the exact recogniser reads."""
    words_in_name = len(entry.name.split())
    return next((match for match in matches if len(match.group(0).split()) > words_in_name), None)


def _compile(entry: _Entry, gap: str = _FULL_GAP) -> re.Pattern[str]:
    """The name's words in order, ``_GAP`` between two of them except after a negating word; its plural ending as the
    exact recogniser allows it (a name with two or more capitals only as written: "GPU kernel drivers").  With
    ``gap=_OPEN_GAP``: any word in a gap, captured."""
    parts = entry.name.split()
    body = re.escape(parts[0])
    for before, part in pairwise(parts):
        body += (_SPACE if before.lower() in NEGATING_WORDS else gap) + re.escape(part)
    ending, written_case = plural_ending(entry.name, entry.kind)
    if written_case:  # with capitals, the plural only after the name in its written case
        return re.compile(rf"(?i:{_bounded(body)})|{_bounded(body + ending)}")
    return re.compile(rf"(?i:{_bounded(body + ending)})")


def _bounded(pattern: str) -> str:
    """``pattern`` as whole words (inside ``(?i:…)`` the boundary letters fold as in the recogniser's patterns)."""
    return rf"(?<![A-Za-z0-9_]){pattern}(?![A-Za-z0-9_])"


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
    # made once per name for find(), which tests them for each candidate (some 80 a record)
    before_last: frozenset[str] = field(init=False)  # ``words`` without ``last``: needed as written
    last_forms: tuple[str, str, str] = field(init=False)  # ``last`` as written and with the plural endings accepted

    def __post_init__(self) -> None:
        object.__setattr__(self, "before_last", self.words - {self.last})  # frozen: set once, here
        object.__setattr__(self, "last_forms", (self.last, self.last + "s", self.last + "es"))


class LooseNames:
    """``find(text, skip)``: names written with one modifier inside, per concept not in ``skip``, first match each."""

    def __init__(self, vocab: Vocabulary) -> None:
        entries: list[_Entry] = []
        for kind in INFERRED_KINDS:
            for concept in vocab.of_kind(kind):
                for name in dict.fromkeys(n for n in concept.names() if n):
                    parts = name.split()
                    if len(parts) < 2 or not name.isascii() or len(name) < CASE_SENSITIVE_BELOW or name in concept.cased:
                        continue
                    words = _WORD.findall(name.lower())
                    if not words or all(part.lower() in NEGATING_WORDS for part in parts[:-1]):
                        continue  # no gap may hold a word
                    entries.append(_Entry(name, concept.id, kind.value, frozenset(words), words[-1], parts[0].lower()))
        # longer names first, as the exact recogniser credits them
        self._entries = sorted(entries, key=lambda entry: -len(entry.name))
        # compiled on first use: most names are never candidates
        self._compiled: dict[int, re.Pattern[str]] = {}
        self._open: dict[int, re.Pattern[str]] = {}  # with _OPEN_GAP
        self._by_first: dict[str, list[int]] = defaultdict(list)
        for position, entry in enumerate(self._entries):
            self._by_first[_WORD.findall(entry.name.lower())[0]].append(position)

    def _pattern(self, position: int) -> re.Pattern[str]:
        pattern = self._compiled.get(position)
        if pattern is None:
            pattern = self._compiled[position] = _compile(self._entries[position])
        return pattern

    def _first_match(self, position: int, text: str, lowered: str) -> re.Match[str] | None:
        """The name's first loose match, tried only where its first word starts (a search of the whole text with
        the pattern's lookbehind costs a step at every character).  ``lowered`` has ``text``'s offsets: ``find``
        leaves a text that lowercasing changes in length (U+0130, in ``FOLD_CHARS``) to ``reference_find``.  Each
        start is matched by :func:`_open_match` (the ``_GAP`` pattern compiled only if a barred word is met); the first
        match with a word inside is the name's (:func:`_with_a_word_inside`)."""
        entry = self._entries[position]
        open_pattern = self._open.get(position)
        if open_pattern is None:
            open_pattern = self._open[position] = _compile(entry, _OPEN_GAP)
        strict = partial(self._pattern, position)
        words_in_name = len(entry.name.split())
        # the loop of _with_a_word_inside over the starts, written out: no generator and closure per start of a name
        start = lowered.find(entry.first)
        while start >= 0:
            match = _open_match(open_pattern, strict, text, start)  # the lookbehind still sees text[start - 1]
            if match is not None and len(match.group(0).split()) > words_in_name:
                return match
            start = lowered.find(entry.first, start + 1)
        return None

    def find(self, text: str, skip: set[str] | frozenset[str] = frozenset()) -> list[LooseMatch]:
        """Each concept not in ``skip`` whose name matches loosely, with a word inside, once (its first name in
        priority order that does, at that name's first such match)."""
        if FOLD_CHARS.search(text):
            return self.reference_find(text, skip)  # a character that case-insensitive matching folds unlike lower()
        lowered = text.lower()
        present = set(_WORD.findall(lowered))
        candidates = sorted(p for first in self._by_first.keys() & present for p in self._by_first[first])
        found: dict[str, LooseMatch] = {}
        entries = self._entries
        for position in candidates:  # in priority order
            entry = entries[position]
            if entry.concept_id in skip or entry.concept_id in found:
                continue
            # every word of the name is in the text, its last one perhaps with a plural ending (most candidates fail here)
            if not entry.before_last <= present or present.isdisjoint(entry.last_forms):
                continue
            match = self._first_match(position, text, lowered)
            if match:
                found[entry.concept_id] = LooseMatch(entry.concept_id, entry.kind, entry.name, match.start(), match.end())
        return sorted(found.values(), key=lambda m: (m.start, m.concept_id))

    def reference_find(self, text: str, skip: set[str] | frozenset[str] = frozenset()) -> list[LooseMatch]:
        """``find`` the straightforward way: every name's pattern searched over the whole text, in priority order."""
        found: dict[str, LooseMatch] = {}
        for position, entry in enumerate(self._entries):
            if entry.concept_id in skip or entry.concept_id in found:
                continue
            match = _with_a_word_inside(_every_start(self._pattern(position), text), entry)
            if match:
                found[entry.concept_id] = LooseMatch(entry.concept_id, entry.kind, entry.name, match.start(), match.end())
        return sorted(found.values(), key=lambda m: (m.start, m.concept_id))
