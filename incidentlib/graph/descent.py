"""Vocabulary descent: every concept below a concept in the ``broader``/``narrower`` hierarchy."""

from __future__ import annotations

from ..vocab import Vocabulary


def descendants(vocab: Vocabulary, concept_id: str) -> set[str]:
    """The transitive closure of ``narrower`` from ``concept_id`` (the concept itself excluded)."""
    found: set[str] = set()
    stack = vocab.narrower(concept_id)
    while stack:
        current = stack.pop()
        if current not in found:
            found.add(current)
            stack.extend(vocab.narrower(current))
    return found
