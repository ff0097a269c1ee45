"""Recognise vocabulary concepts in free text, in Korean and English.

Latin-script names match on word boundaries, case-insensitively (``NCCL``,
``InfiniBand``, ``ECC errors``), also with an English plural ending (``config changes``,
``GPUs``, ``power outages``: a postmortem names several of a thing as often as one), and acronyms also at
a CamelCase boundary (``WorkNCCL``); Hangul names match where a Korean word begins and may
be followed by a particle or ending glued to them (InfiniBand 패브릭에서, 재시작했다), but not by
the rest of a longer word (``러스터`` for Lustre is not found in 클러스터, nor ``메타`` in 메타데이터).  Very short
Latin aliases (under three letters) must match in their written case, so ``IB``
is recognised but the word "ib" inside other text is not; so must the names a concept lists as ``cased``, whose lower
case is an everyday word (``UPS`` but not the "ups" of "follow-ups").
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise

from ..models import ConceptKind
from ..vocab import Vocabulary

#: Shortest name recognised: a one-character name (one Hangul syllable, one letter) would match inside
#: almost any text (a Hangul name may be followed by any particle or ending).
MIN_NAME_CHARS = 2
#: Latin names shorter than this must match in their written case ("IB" but not "ib").
CASE_SENSITIVE_BELOW = 3
RECOGNISED_KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom, ConceptKind.organization)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_HANGUL_PAIR = re.compile(r"[\uac00-\ud7a3]{2}")
_HANGUL_PAIRS = re.compile(r"(?=([\uac00-\ud7a3]{2}))")  # every pair of adjacent syllables, overlapping
#: Syllables that can begin what Korean glues after a noun: a particle (가, 를, 에서, 까지, 처럼, 마다, 끼리, 같이,
#: 대로 …), the copula and its forms (다, 이다, 였다, 예요, 여서, 지만), the light verbs that make a noun a verb and
#: the endings incident notes are written in (하다/했다/해/함/합니다, 되다/됐다/돼/됨/됩니다, 시키다, 당하다, 받다),
#: the plural 들, and the bound nouns of "for / per / between / within / during / after / before / when / side /
#: group" (용, 별, 당, 간, 내, 중, 후, 전, 때, 쪽, 측, 단, 군).  A Hangul name followed by any other syllable is the
#: start of a longer word (메타 in 메타데이터, 레이 in 레이턴시 and 레이블, 디스크 in 디스크립터), which is another word.
HANGUL_ENDING_STARTS = ("이가은는을를의에께한로으와과도만까부보처마나며고랑라야였했됐되된하해돼할될들적시받당용별간내중조뿐밖씩엔인임입일란면든"
                        "다함됨합됩요예여지거후전때대같쯤끼쪽측단군")
#: A Hangul name must not continue a Hangul word (러스터 is not Lustre inside 클러스터: Korean glues particles and
#: endings after a word, not before it) nor run into a longer one (see HANGUL_ENDING_STARTS).
_HANGUL_BEFORE = r"(?<![\uac00-\ud7a3])"
_HANGUL_AFTER = rf"(?:(?![\uac00-\ud7a3])|(?=[{HANGUL_ENDING_STARTS}]))"
#: An NVIDIA error code named "Xid 79" or "SXid 12028": the kernel writes the device between the two words,
#: "NVRM: Xid (PCI:0000:3b:00): 79" (older drivers "Xid (0000:3b:00): 79"), and the name matches that too; as
#: before, the two words need something between them ("Xid79" is not the name).
_DEVICE_CODE = re.compile(r"(s?xid) (\d+)", re.IGNORECASE)
_LATIN_BEFORE = r"(?<![A-Za-z0-9_])"
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")
_LATIN_AFTER = r"(?![A-Za-z0-9_])"
#: The characters of a word for the boundary rules (``(?<![A-Za-z0-9_])`` in the patterns); in lowercased text.
_WORD_RUN = re.compile(r"[a-z0-9_]+")
#: The same words from the UTF-8 bytes of lowercased text: every other byte becomes a space (a non-ASCII
#: character is encoded in bytes >= 0x80 only, so it separates words just as in ``_WORD_RUN``).
_WORD_BYTES = bytes(c if chr(c) in "abcdefghijklmnopqrstuvwxyz0123456789_" else 0x20 for c in range(256))
#: The tail of a CamelCase word that an acronym can match (Work|NCCL, Core|DNS): upper case and digits after a
#: lowercase letter, up to the end of the word.
_CAMEL_TAIL = re.compile(r"[a-z]([A-Z][A-Z0-9]*)(?![A-Za-z0-9_])")  # the group; a match never ends in [a-z]
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]+")
#: Endings after which the English plural takes ``es`` (``bus`` → ``buses``, ``switch`` → ``switches``); after any
#: other letter it takes ``s`` only (``pipe`` → ``pipes``, so ``pip`` does not match "pipes").
_ES_AFTER = ("s", "x", "z", "ch", "sh")
#: The endings as keys of the candidate index: the word as written, and with each ending.
_PLURAL_ENDINGS = (b"", b"s", b"es")


def plural_ending(name: str, kind: str) -> tuple[str, bool]:
    """The plural ending a case-insensitive Latin name may take ("" for none), and whether only after the name in its
    written case.  An organisation's name has no plural (Stripe is not "stripes"); a name in capitals (``GPU``,
    ``SAN``, ``PoP``) takes ``s`` only as written ("GPUs", not "sans" or "pops"); a name ending in anything but a
    letter takes none (``Xid 79``).  Irregular plurals ("policies") are left to aliases."""
    if kind == ConceptKind.organization.value or not name[-1].isalpha():
        return "", False
    if sum(char.isupper() for char in name) >= 2:
        return "s", True
    return ("(?:es)?" if name.lower().endswith(_ES_AFTER) else "s?"), False


@dataclass(frozen=True)
class Mention:
    concept_id: str
    kind: str
    matched: str


#: Characters that case-insensitive matching equates with an ASCII letter although ``str.lower`` does not
#: map them to it (Kelvin sign, long s, dotted/dotless i; the dotted I also lowercases to two characters):
#: a text holding one is matched by running every name's pattern.
FOLD_CHARS = re.compile("[\u212a\u017f\u0130\u0131]")


@dataclass(frozen=True)
class _Name:
    name: str
    concept_id: str
    kind: str
    folded: bool  # matched case-insensitively: found in the lowercased text as ``needle``
    needle: str  # what every match is, in the lowercased text (folded) or in the text; "" to search the pattern


class ConceptRecognizer:
    """Finds vocabulary names in text.

    Each recognised concept is credited to its first name, in priority order (longer names
    first), whose pattern matches anywhere in the text; ``spans`` reports that name's first match.

    One pass over the text finds the few names that can match at all, from keys no match can
    lack: the text's words and pairs of adjacent words (wherever a Latin name matches, its
    first two words are two adjacent whole words of the text, since the pattern asks for word
    boundaries and the name's own separators are not word characters; a name whose last word is among them is also
    keyed with each plural ending), the upper-case tails of its CamelCase words (an
    acronym's second way to match), and its Hangul syllable pairs (a Hangul name is a
    substring, so each of its pairs is in the text).  Each candidate is then located with
    ``str.find`` and confirmed with its own pattern at that offset, so the result is the
    pattern's own first match: the same as searching every name's pattern over the text
    (``reference_spans``), which is what runs for the rare text holding a character that
    case-insensitive matching folds differently from ``str.lower``.  Cost per text: a few
    regular-expression scans in C plus the candidates, not one scan per vocabulary name.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        names: list[_Name] = []
        for kind in RECOGNISED_KINDS:
            for concept in vocab.of_kind(kind):
                cased = set(concept.cased)
                for name in dict.fromkeys(n for n in concept.names() if n and len(n) >= MIN_NAME_CHARS):
                    hangul = bool(_HANGUL.search(name))
                    sensitive = hangul or len(name) < CASE_SENSITIVE_BELOW or name in cased
                    needle = "" if _DEVICE_CODE.fullmatch(name) else name if sensitive else name.lower() if name.isascii() else ""
                    names.append(_Name(name, concept.id, kind.value, not sensitive, needle))
        # longer names first, so "InfiniBand fabric" is credited before "fabric"-like aliases
        names.sort(key=lambda item: -len(item.name))
        self._names = names
        self._compiled: dict[tuple[str, str, bool], re.Pattern[str]] = {}
        # key -> positions in self._names; a name without a key is searched in every text
        self._by_word: dict[bytes, list[int]] = defaultdict(list)
        self._by_words: dict[tuple[bytes, bytes], list[int]] = defaultdict(list)
        self._by_tail: dict[str, list[int]] = defaultdict(list)
        self._by_pair: dict[str, list[int]] = defaultdict(list)
        self._always: list[int] = []
        for position, item in enumerate(names):
            if _HANGUL.search(item.name):
                pair = _HANGUL_PAIR.search(item.name)
                (self._by_pair[pair.group(0)] if pair else self._always).append(position)
                continue
            words = [w.encode() for w in _WORD_RUN.findall(item.name.lower())] if item.name.isascii() else []
            # a name's last word may carry a plural ending (plural_ending): a one-word name, or a two-word name's
            # second word, is keyed in the plural too (one more key, not a lookup more per text)
            endings = _PLURAL_ENDINGS if plural_ending(item.name, item.kind)[0] else (b"",)
            if _DEVICE_CODE.fullmatch(item.name):  # its two words need not be adjacent (_DEVICE_CODE)
                self._by_word[words[0]].append(position)
            elif len(words) > 1:
                for ending in endings if len(words) == 2 else (b"",):
                    self._by_words[(words[0], words[1] + ending)].append(position)
            elif words:
                for ending in endings:
                    self._by_word[words[0] + ending].append(position)
            else:
                self._always.append(position)
            if item.folded and _ACRONYM.fullmatch(item.name):
                self._by_tail[item.name].append(position)

    def names(self) -> list[tuple[str, str]]:
        """(name, concept id) of every recognised name, in priority order."""
        return [(item.name, item.concept_id) for item in self._names]

    def _pattern(self, item: _Name) -> re.Pattern[str]:
        # one name may be an organisation's and a component's, with other endings, and cased for one of them only
        key = (item.name, item.kind, item.folded)
        pattern = self._compiled.get(key)
        if pattern is None:
            pattern = self._compiled[key] = self._compile(item.name, item.kind, item.folded)
        return pattern

    @staticmethod
    def _compile(name: str, kind: str, folded: bool = True) -> re.Pattern[str]:
        escaped = re.escape(name)
        if _HANGUL.search(name):
            # each end is bounded by the rule of its own script ("NVIDIA 드라이버" starts as a Latin word does)
            before = _HANGUL_BEFORE if _HANGUL.match(name) else _LATIN_BEFORE if _WORD_CHAR.match(name) else ""
            after = _HANGUL_AFTER if _HANGUL.match(name[-1]) else _LATIN_AFTER if _WORD_CHAR.match(name[-1]) else ""
            return re.compile(before + escaped + after)
        if len(name) < CASE_SENSITIVE_BELOW:
            return re.compile(rf"(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_])")
        if not folded:  # a cased name: as written, and its plural ending as written too
            ending, written_case = plural_ending(name, kind)
            return re.compile(rf"(?<![A-Za-z0-9_]){escaped}{f'(?:{ending})?' if written_case else ending}(?![A-Za-z0-9_])")
        code = _DEVICE_CODE.fullmatch(name)
        if code:
            return re.compile(rf"(?i:(?<![A-Za-z0-9_]){code.group(1)}(?:\s*\((?:pci:)?[0-9a-f:.]+\)\s*:?\s*|\s+)"
                              rf"{code.group(2)}(?![A-Za-z0-9_]))")
        ending, written_case = plural_ending(name, kind)
        pattern = rf"(?i:(?<![A-Za-z0-9_]){escaped}{'' if written_case else ending}(?![A-Za-z0-9_]))"
        if written_case:
            pattern += rf"|(?<![A-Za-z0-9_]){escaped}{ending}(?![A-Za-z0-9_])"
        if _ACRONYM.fullmatch(name):
            # an acronym also matches at a CamelCase boundary: NCCL in WorkNCCL, DNS in CoreDNS
            pattern += rf"|(?<![A-Z0-9_]){escaped}(?![A-Za-z0-9_])"
        return re.compile(pattern)

    def _candidates(self, text: str, lowered: str) -> list[int]:
        """Positions in the priority order of every name that can match ``text`` (a superset of those that do)."""
        found = list(self._always)
        words = lowered.encode("utf-8", "surrogatepass").translate(_WORD_BYTES).split()
        for word in self._by_word.keys() & set(words):
            found.extend(self._by_word[word])
        for pair in self._by_words.keys() & set(pairwise(words)):
            found.extend(self._by_words[pair])
        for tail in self._by_tail.keys() & set(_CAMEL_TAIL.findall(text)):
            found.extend(self._by_tail[tail])
        if _HANGUL.search(text):
            for syllables in self._by_pair.keys() & set(_HANGUL_PAIRS.findall(text)):
                found.extend(self._by_pair[syllables])
        return sorted(set(found))

    def _first_match(self, item: _Name, text: str, lowered: str) -> re.Match[str] | None:
        """The pattern's first match in ``text``: the first occurrence of the needle where the pattern matches."""
        pattern = self._pattern(item)
        if not item.needle:
            return pattern.search(text)
        haystack = lowered if item.folded else text
        start = haystack.find(item.needle)
        while start >= 0:
            match = pattern.match(text, start)  # the lookbehind still sees text[start - 1]
            if match:
                return match
            start = haystack.find(item.needle, start + 1)
        return None

    def _matches(self, text: str) -> list[tuple[_Name, re.Match[str]]]:
        """Per recognised concept, its first name in priority order that matches and that name's first match."""
        if FOLD_CHARS.search(text):
            return self._reference_matches(text)
        lowered = text.lower()
        found: dict[str, tuple[_Name, re.Match[str]]] = {}
        for position in self._candidates(text, lowered):
            item = self._names[position]
            if item.concept_id not in found:
                match = self._first_match(item, text, lowered)
                if match:
                    found[item.concept_id] = (item, match)
        return list(found.values())

    def _reference_matches(self, text: str) -> list[tuple[_Name, re.Match[str]]]:
        # every name in turn; one whose needle is not a substring of the text cannot match, so its scan is skipped
        # (no shortcut for a text holding a case-folding exception)
        lowered = None if FOLD_CHARS.search(text) else text.lower()
        found: dict[str, tuple[_Name, re.Match[str]]] = {}
        for item in self._names:
            if lowered is not None and item.needle and item.needle not in (lowered if item.folded else text):
                continue
            if item.concept_id not in found:
                match = self._pattern(item).search(text)
                if match:
                    found[item.concept_id] = (item, match)
        return list(found.values())

    @staticmethod
    def _spans(matches: list[tuple[_Name, re.Match[str]]]) -> list[tuple[Mention, int, int]]:
        return [(Mention(item.concept_id, item.kind, match.group(0)), match.start(), match.end()) for item, match in matches]

    def spans(self, text: str) -> list[tuple[Mention, int, int]]:
        """Each recognised concept once, with the character span of its first match."""
        return self._spans(self._matches(text))

    def reference_spans(self, text: str) -> list[tuple[Mention, int, int]]:
        """``spans`` the straightforward way: every name's pattern searched over the whole text, in priority order
        (skipping a name whose needle is not in the text at all)."""
        return self._spans(self._reference_matches(text))

    def recognise(self, text: str) -> list[Mention]:
        """Each recognised concept once; ``matched`` is the vocabulary name that matched."""
        return [Mention(item.concept_id, item.kind, item.name) for item, _ in self._matches(text)]
