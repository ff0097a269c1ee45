"""Error-signal families: find Xid, SXid, NCCL, InfiniBand, PCIe, ECC and Kubernetes signals in text.

Each family in data/diagnosis/signals.yaml has patterns; the first pattern that matches a
line gives the code, and the code's entry (or the family default) gives the meaning.  A
text yields at most one match per (family, code), in order of first appearance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..views import ConceptRef, SignalMatch
from ..vocab import Vocabulary
from .tables import Family, SignalTable

# A pasted log longer than this is cut: the first lines of a burst carry the signal.
MAX_TEXT_CHARS = 200_000
# The matched excerpt shown to the reader is cut to this many characters.
EXCERPT_CHARS = 240


@dataclass(frozen=True)
class CompiledFamily:
    family: Family
    patterns: tuple[tuple[re.Pattern[str], str | None], ...]


def compile_table(table: SignalTable) -> list[CompiledFamily]:
    return [CompiledFamily(f, tuple((p.compiled(), p.code) for p in f.patterns)) for f in table.families]


def _refs(vocab: Vocabulary, kind: str, ids: list[str], lang: str) -> list[ConceptRef]:
    seen: list[str] = []
    for concept_id in ids:
        if concept_id not in seen:
            seen.append(concept_id)
    return [ConceptRef(id=i, kind=kind, label=vocab.label(i, lang)) for i in seen]


def match_line(compiled: list[CompiledFamily], line: str) -> list[tuple[Family, str, str]]:
    """(family, code, excerpt) for every family that recognises ``line``."""
    found = []
    for entry in compiled:
        for pattern, fixed in entry.patterns:
            hit = pattern.search(line)
            if hit is None:
                continue
            code = fixed if fixed is not None else hit.group("code")
            start = max(0, hit.start() - 60)
            found.append((entry.family, code, line[start : start + EXCERPT_CHARS].strip()))
            break
    return found


def explain(family: Family, code: str, excerpt: str, vocab: Vocabulary, lang: str) -> SignalMatch:
    entry = family.lookup(code)
    meaning = entry.meaning.get(lang) if entry else family.default.get(lang).replace("{code}", code)
    return SignalMatch(
        family=family.id, family_label=family.label.get(lang), code=entry.code if entry else code,
        name=entry.name if entry else None, known=entry is not None,
        severity=entry.severity if entry else "warning", meaning=meaning, excerpt=excerpt,
        symptoms=_refs(vocab, "symptom", [*family.symptoms, *(entry.symptoms if entry else [])], lang),
        causes=_refs(vocab, "cause", list(entry.causes) if entry else [], lang),
        components=_refs(vocab, "component", [*family.components, *(entry.components if entry else [])], lang),
    )


def find_signals(compiled: list[CompiledFamily], text: str, vocab: Vocabulary, lang: str) -> list[SignalMatch]:
    """Every distinct (family, code) signal in ``text``, explained, in order of appearance."""
    seen: set[tuple[str, str]] = set()
    matches = []
    for line in text[:MAX_TEXT_CHARS].splitlines():
        for family, code, excerpt in match_line(compiled, line):
            entry = family.lookup(code)
            key = (family.id, (entry.code if entry else code).lower())
            if key in seen:
                continue
            seen.add(key)
            matches.append(explain(family, code, excerpt, vocab, lang))
    return matches
