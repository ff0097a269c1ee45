"""Concepts an error message stands for: "Xid 79" is a GPU that fell off the bus, whatever words surround it.

A pasted log line or a ticket that quotes one often names no concept at all ("NVRM: Xid (PCI:0000:b3:00): 79, pid=2421,
…"), so neither the names (:class:`~incidentlib.search.concepts.ConceptRecognizer`) nor a classifier learnt from
narratives find what it is about.  The signal table (``data/diagnosis/signals.yaml``, :mod:`incidentlib.analysis.tables`)
already says it: each family (Xid, SXid, NCCL watchdog, InfiniBand completion status, PCIe link, ECC, Kubernetes event
reason) and each of its known codes lists the components, symptoms and causes it points to.  :class:`SignalConcepts`
reads the components and symptoms for every signal found in a text, line by line, with the matched excerpt as evidence.

A message shows what failed and where: those are the family's own concepts plus its code's (a code the table does not
list keeps the family's).  The causes the table gives are what usually lies behind the message, a lead for
``diagnose``, and not what the record that quotes it says its incident was caused by: a monitor that misses Xid 94 was
caused by its design, not by the ECC error it missed.  Proposed as causes, they lowered label agreement on the bundled
library with its concepts held out (docs/search.md, "Error messages as evidence of concepts"), so they are left out.
The tagger proposes the concepts with the method ``signal`` (:data:`.tagger.SIGNAL_CONFIDENCE`), so a reviewer sees how
they were found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..analysis.families import MAX_TEXT_CHARS, CompiledFamily, gate_test, lines_to_read, match_line
from ..analysis.tables import Family
from ..models import ConceptKind
from ..vocab import Vocabulary


@dataclass(frozen=True)
class SignalConcept:
    """A concept a signal in the text points to, the signal (``family:code``) and the excerpt it was found in."""

    concept_id: str
    kind: ConceptKind
    signal: str
    excerpt: str


def _pointed_to(family: Family, code: str) -> tuple[str, list[tuple[ConceptKind, str]]]:
    """The signal's name (``family:code``, the table's spelling of a known code) and the components and symptoms it
    shows, family's first.  Not the table's causes: see the module docstring."""
    entry = family.lookup(code)
    concepts = [(ConceptKind.component, c) for c in family.components] + [(ConceptKind.symptom, c) for c in family.symptoms]
    if entry is not None:
        concepts += [(ConceptKind.component, c) for c in entry.components]
        concepts += [(ConceptKind.symptom, c) for c in entry.symptoms]
    return f"{family.id}:{entry.code if entry is not None else code}", concepts


class SignalConcepts:
    """``find(text)`` → the concepts the text's error signals point to, each once, in order of first appearance."""

    def __init__(self, families: Sequence[CompiledFamily], vocab: Vocabulary) -> None:
        self.families = list(families)
        self.vocab = vocab
        # a pattern that matches a line matches the whole text, unless it is anchored to a line's start or end (a
        # team's own table may write ^ or $): only then is the whole-text gate of find() skipped
        self._gated = not any(mark in pattern.pattern for family in self.families for pattern, _, _ in family.patterns
                              for mark in "^$")

    def find(self, text: str, skip: set[str] | None = None) -> list[SignalConcept]:
        """``skip``: concepts found already by another method (not looked up again)."""
        text = text[:MAX_TEXT_CHARS]
        families = self.families
        if self._gated:
            # a pattern that no line can match is one the whole text does not match: the lines are read with the
            # patterns the text matches only (in their order, so each line's first match is the same), and most
            # records, which hold no signal, cost one scan of the text per pattern holding its gate
            held = gate_test(text)
            families = [replace(family, patterns=matching) for family in self.families
                        if (matching := tuple(entry for entry in family.patterns
                                              if held(entry[2]) and entry[0].search(text)))]
            if not families:
                return []
        found: dict[str, SignalConcept] = {}
        done = set(skip or ())
        for line in lines_to_read(families, text.splitlines()):
            for family, code, excerpt in match_line(families, line):
                signal, concepts = _pointed_to(family, code)
                for kind, concept_id in concepts:
                    if concept_id in done or concept_id in found:
                        continue
                    concept = self.vocab.get(concept_id)
                    if concept is None or concept.kind is not kind:  # a table checked against another vocabulary
                        continue
                    found[concept_id] = SignalConcept(concept_id, kind, signal, excerpt)
        return list(found.values())
