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

RECOGNISED_KINDS = (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom, ConceptKind.organization)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")


@dataclass(frozen=True)
class Mention:
    concept_id: str
    kind: str
    matched: str


class ConceptRecognizer:
    def __init__(self, vocab: Vocabulary) -> None:
        self._patterns: list[tuple[re.Pattern[str], str, str, str]] = []
        for kind in RECOGNISED_KINDS:
            for concept in vocab.of_kind(kind):
                for name in dict.fromkeys(n for n in concept.names() if n and len(n) >= 2):
                    self._patterns.append((self._compile(name), concept.id, kind.value, name))
        # longer names first, so "InfiniBand fabric" is credited before "fabric"-like aliases
        self._patterns.sort(key=lambda item: -len(item[3]))

    @staticmethod
    def _compile(name: str) -> re.Pattern[str]:
        escaped = re.escape(name)
        if _HANGUL.search(name):
            return re.compile(escaped)
        if len(name) < 3:
            return re.compile(rf"(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_])")
        pattern = rf"(?i:(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_]))"
        if re.fullmatch(r"[A-Z][A-Z0-9]+", name):
            # an acronym also matches at a CamelCase boundary: NCCL in WorkNCCL, DNS in CoreDNS
            pattern += rf"|(?<![A-Z0-9_]){escaped}(?![A-Za-z0-9_])"
        return re.compile(pattern)

    def recognise(self, text: str) -> list[Mention]:
        found: dict[str, Mention] = {}
        for pattern, concept_id, kind, name in self._patterns:
            if concept_id not in found and pattern.search(text):
                found[concept_id] = Mention(concept_id=concept_id, kind=kind, matched=name)
        return list(found.values())
