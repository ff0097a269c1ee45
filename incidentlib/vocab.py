"""The controlled vocabulary: lookup, labels, hierarchy and suggestions."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from .models import Concept, ConceptKind

#: Shortest text whose prefix matches are offered as suggestions: shorter ones begin too many names to be a hint.
MIN_PREFIX_CHARS = 3
_NOT_WORD = re.compile(r"[\W_]+")


def _folded(text: str) -> str:
    """``text`` case-folded with every run of spaces and punctuation as one hyphen ('Acme ML' -> 'acme-ml')."""
    return _NOT_WORD.sub("-", text.casefold()).strip("-")


class Vocabulary:
    """All concepts of a library, indexed by id and by kind."""

    def __init__(self, concepts: list[Concept]) -> None:
        self._by_id: dict[str, Concept] = {c.id: c for c in concepts}
        self._by_kind: dict[ConceptKind, list[Concept]] = {kind: [] for kind in ConceptKind}
        self._narrower: dict[str, list[str]] = {}
        for concept in concepts:
            self._by_kind[concept.kind].append(concept)
            if concept.broader:
                self._narrower.setdefault(concept.broader, []).append(concept.id)

    def __iter__(self) -> Iterator[Concept]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, concept_id: object) -> bool:
        return concept_id in self._by_id

    def get(self, concept_id: str) -> Concept | None:
        return self._by_id.get(concept_id)

    def ids(self, kind: ConceptKind | None = None) -> list[str]:
        if kind is None:
            return list(self._by_id)
        return [c.id for c in self._by_kind[kind]]

    def of_kind(self, kind: ConceptKind) -> list[Concept]:
        return list(self._by_kind[kind])

    def label(self, concept_id: str, lang: str = "en") -> str:
        concept = self._by_id.get(concept_id)
        return concept.label.get(lang) if concept else concept_id

    def narrower(self, concept_id: str) -> list[str]:
        return list(self._narrower.get(concept_id, []))

    def ancestors(self, concept_id: str) -> list[str]:
        """Broader concepts from nearest to farthest (stops on a cycle)."""
        found: list[str] = []
        current = self._by_id.get(concept_id)
        while current is not None and current.broader and current.broader not in found and current.broader != concept_id:
            found.append(current.broader)
            current = self._by_id.get(current.broader)
        return found

    def resolve(self, text: str, kind: ConceptKind | None = None) -> Concept | None:
        """Find a concept by id, label or alias (case-insensitive), e.g. 'IB' or 'NCCL'."""
        if text in self._by_id and (kind is None or self._by_id[text].kind == kind):
            return self._by_id[text]
        needle = text.strip().casefold()
        for concept in self._by_id.values():
            if kind is not None and concept.kind != kind:
                continue
            if any(name.casefold() == needle for name in concept.names() if name):
                return concept
        return None

    def suggest(self, wrong: str, kind: ConceptKind | None = None, n: int = 3) -> list[str]:
        """Ids the user probably meant: a label/alias match first, then ids, labels or aliases that begin with
        ``wrong`` ('acme' -> acme-ml-platform), then close spellings."""
        found: list[str] = []
        by_name = self.resolve(wrong, kind)
        if by_name is not None:
            found.append(by_name.id)
        prefix = _folded(wrong)
        if len(prefix) >= MIN_PREFIX_CHARS:
            concepts = list(self._by_id.values() if kind is None else self._by_kind[kind])
            # ids first (what a filter takes), then labels and aliases
            found += [c.id for c in concepts if c.id not in found and c.id.startswith(prefix)]
            found += [c.id for c in concepts if c.id not in found
                      and any(_folded(name).startswith(prefix) for name in c.names() if name)]
        for candidate in difflib.get_close_matches(wrong, self.ids(kind), n=n, cutoff=0.5):
            if candidate not in found:
                found.append(candidate)
        return found[:n]
