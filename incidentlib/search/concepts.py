"""Recognise vocabulary concepts in free text, in Korean and English.

Latin-script names match on word boundaries, case-insensitively (``NCCL``,
``InfiniBand``, ``ECC errors``), and acronyms also at a CamelCase boundary
(``WorkNCCL``); Hangul names match as substrings, because
particles attach to the end of Korean words (InfiniBand 패브릭에서).  Very short
Latin aliases (under three letters) must match in their written case, so ``IB``
is recognised but the word "ib" inside other text is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models import ConceptKind
from ..vocab import Vocabulary

#: Shortest name recognised: a one-character name (one Hangul syllable, one letter) would match inside
#: almost any text, since Hangul names match as substrings.
MIN_NAME_CHARS = 2
#: Latin names shorter than this must match in their written case ("IB" but not "ib").
CASE_SENSITIVE_BELOW = 3
RECOGNISED_KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom, ConceptKind.organization)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")


@dataclass(frozen=True)
class Mention:
    concept_id: str
    kind: str
    matched: str


#: Characters that case-insensitive matching equates with an ASCII letter although ``str.lower`` does not
#: map them to it (Kelvin sign, long s, dotted/dotless i): text holding one skips the substring prefilter.
_FOLD_EXCEPTIONS = frozenset("\u212a\u017f\u0130\u0131")


class ConceptRecognizer:
    """Finds vocabulary names in text.

    Cost per text: one substring test per name (``needle in text``, in C) picks the few names
    that can match at all; only those run their regular expression, compiled on first use.
    A name's pattern can only match where its letters occur, so the prefilter never drops a
    match: case-sensitive names are tested against the text, case-insensitive ASCII names
    against the lowercased text.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        # (name, concept id, kind, needle, needle is lowercase); patterns compiled lazily by name.  The needle is
        # the name itself for case-sensitive patterns (Hangul, short names), its lowercase for case-insensitive
        # ASCII names, and empty (always run the pattern) for case-insensitive names with other letters.
        self._names: list[tuple[str, str, str, str, bool]] = []
        for kind in RECOGNISED_KINDS:
            for concept in vocab.of_kind(kind):
                for name in dict.fromkeys(n for n in concept.names() if n and len(n) >= MIN_NAME_CHARS):
                    sensitive = bool(_HANGUL.search(name)) or len(name) < CASE_SENSITIVE_BELOW
                    needle = name if sensitive else name.lower() if name.isascii() else ""
                    self._names.append((name, concept.id, kind.value, needle, not sensitive))
        # longer names first, so "InfiniBand fabric" is credited before "fabric"-like aliases
        self._names.sort(key=lambda item: -len(item[0]))
        self._compiled: dict[str, re.Pattern[str]] = {}

    def _pattern(self, name: str) -> re.Pattern[str]:
        pattern = self._compiled.get(name)
        if pattern is None:
            pattern = self._compiled[name] = self._compile(name)
        return pattern

    @staticmethod
    def _compile(name: str) -> re.Pattern[str]:
        escaped = re.escape(name)
        if _HANGUL.search(name):
            return re.compile(escaped)
        if len(name) < CASE_SENSITIVE_BELOW:
            return re.compile(rf"(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_])")
        pattern = rf"(?i:(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_]))"
        if re.fullmatch(r"[A-Z][A-Z0-9]+", name):
            # an acronym also matches at a CamelCase boundary: NCCL in WorkNCCL, DNS in CoreDNS
            pattern += rf"|(?<![A-Z0-9_]){escaped}(?![A-Za-z0-9_])"
        return re.compile(pattern)

    def _candidates(self, text: str) -> list[tuple[str, str, str]]:
        """(name, concept id, kind) of the names that occur in ``text`` as a substring, in priority order."""
        lowered = text.lower()
        exact = not _FOLD_EXCEPTIONS.isdisjoint(text)  # rare: fall back to testing every name
        found = []
        for name, concept_id, kind, needle, folded in self._names:
            if exact or needle in (lowered if folded else text):
                found.append((name, concept_id, kind))
        return found

    def spans(self, text: str) -> list[tuple[Mention, int, int]]:
        """Each recognised concept once, with the character span of its first match."""
        found: dict[str, tuple[Mention, int, int]] = {}
        for name, concept_id, kind in self._candidates(text):
            if concept_id in found:
                continue
            match = self._pattern(name).search(text)
            if match:
                found[concept_id] = (Mention(concept_id=concept_id, kind=kind, matched=match.group(0)), match.start(), match.end())
        return list(found.values())

    def recognise(self, text: str) -> list[Mention]:
        found: dict[str, Mention] = {}
        for name, concept_id, kind in self._candidates(text):
            if concept_id not in found and self._pattern(name).search(text):
                found[concept_id] = Mention(concept_id=concept_id, kind=kind, matched=name)
        return list(found.values())
