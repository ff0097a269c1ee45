"""Error-signal families: find Xid, SXid, NCCL, InfiniBand, PCIe, ECC and Kubernetes signals in text.

Each family in data/diagnosis/signals.yaml has patterns; the first pattern that matches a
line gives the code, and the code's entry (or the family default) gives the meaning.  A
text yields at most one match per (family, code), in order of first appearance.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ..search.concepts import FOLD_CHARS
from ..views import ConceptRef, SignalMatch
from ..vocab import Vocabulary
from .tables import Family, SignalTable

# A pasted log longer than this is cut: the first lines of a burst carry the signal.
MAX_TEXT_CHARS = 200_000
# The matched excerpt shown to the reader is cut to this many characters.
EXCERPT_CHARS = 240


#: The shortest literal worth a substring test: one or two letters are in nearly every line.
GATE_MIN_CHARS = 3


@dataclass(frozen=True)
class CompiledFamily:
    family: Family
    #: (pattern, fixed code, gate): a line none of whose lowercased gate strings it holds cannot match the pattern
    patterns: tuple[tuple[re.Pattern[str], str | None, tuple[str, ...] | None], ...]


def compile_table(table: SignalTable) -> list[CompiledFamily]:
    compiled = []
    for family in table.families:
        patterns = [(regex, pattern.code, pattern_gate(regex))
                    for pattern in family.patterns for regex in (pattern.compiled(),)]
        compiled.append(CompiledFamily(family, tuple(patterns)))
    return compiled


def pattern_gate(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase strings one of which every match of ``pattern`` contains, or None when none is found.

    Read from the pattern's parse tree: a run of ASCII literal characters in a sequence (zero-width anchors such as
    ``\\b`` inside it) is required; so is what a group, or a repeat of at least one, requires; a branch requires one
    of its alternatives' strings when each has one.  Of the requirements found, the one whose shortest string is
    longest is the gate (the most selective).  Testing ``any(s in line.lower() for s in gate)`` before the search
    skips most lines of a text at the cost of a substring test each: a necessary condition, so the matches are the
    same (``tests/test_signal_gates.py`` compares them over the bundled library)."""
    try:  # the standard library's own regular-expression parser: no public interface gives the tree
        from re import _constants as sre  # type: ignore[attr-defined]
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern.pattern, pattern.flags)
    except (ImportError, AttributeError, re.error):
        return None

    def required(items: Any) -> tuple[str, ...] | None:
        found: list[tuple[str, ...]] = []
        run: list[str] = []

        def end_run() -> None:
            if len(run) >= GATE_MIN_CHARS:
                found.append(("".join(run),))
            run.clear()

        for op, value in items:
            if op is sre.LITERAL and value < 128:
                run.append(chr(value).lower())
                continue
            if op is sre.AT:  # \b, ^, $: they match no character, so the run goes on
                continue
            end_run()
            inner: tuple[str, ...] | None = None
            if op is sre.SUBPATTERN:
                inner = required(value[-1])
            elif op is sre.BRANCH:
                alternatives = [required(branch) for branch in value[1]]
                if all(alternatives):
                    inner = tuple(text for alternative in alternatives if alternative for text in alternative)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and value[0] >= 1:
                inner = required(value[2])
            if inner:
                found.append(inner)
        end_run()
        return max(found, key=lambda strings: min(len(text) for text in strings)) if found else None

    return required(tree)


def _refs(vocab: Vocabulary, kind: str, ids: list[str], lang: str) -> list[ConceptRef]:
    seen: list[str] = []
    for concept_id in ids:
        if concept_id not in seen:
            seen.append(concept_id)
    return [ConceptRef(id=i, kind=kind, label=vocab.label(i, lang)) for i in seen]


def gate_test(text: str) -> Callable[[tuple[str, ...] | None], bool]:
    """``held(gate)``: whether ``text`` holds one of the gate's strings (a pattern without a gate: always)."""
    if FOLD_CHARS.search(text) is not None:
        # case-insensitive matching equates ı, İ, ſ and the Kelvin sign with ASCII letters; str.lower() does not
        return lambda gate: True
    lowered = text.lower()
    return lambda gate: gate is None or any(needed in lowered for needed in gate)


def lines_to_read(compiled: Sequence[CompiledFamily], lines: Sequence[str]) -> Sequence[str]:
    """The ``lines``, in order, that may hold a match of a pattern of ``compiled``: :func:`match_line` finds nothing
    in the others (their gate tests all fail), so they need not be read.

    Each gate string is looked up in the whole lowered text, one scan per string, not in every line once per pattern.
    Every line is kept when a pattern has no gate, or when the text holds a character that case-insensitive matching
    equates with ASCII letters (``gate_test`` passes every gate then).
    """
    gates = [gate for entry in compiled for _, _, gate in entry.patterns]
    if any(gate is None for gate in gates) or any(FOLD_CHARS.search(line) is not None for line in lines):
        return lines
    lowered = [line.lower() for line in lines]
    text = "\n".join(lowered)
    starts = list(accumulate((len(line) + 1 for line in lowered), initial=0))  # from the lowered lines' own lengths
    held: set[int] = set()
    for needed in {string for gate in gates if gate for string in gate}:
        at = text.find(needed)
        while at != -1:
            line = bisect_right(starts, at) - 1
            held.add(line)
            at = text.find(needed, starts[line + 1])  # this line holds it: go on from the next
    return [lines[line] for line in sorted(held)]


def match_line(compiled: list[CompiledFamily], line: str) -> list[tuple[Family, str, str]]:
    """(family, code, excerpt) for every family that recognises ``line``; each pattern is searched only in a line
    that holds its gate (:func:`pattern_gate`)."""
    found = []
    held = gate_test(line)
    for entry in compiled:
        for pattern, fixed, gate in entry.patterns:
            if not held(gate):
                continue
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
    for line in lines_to_read(compiled, text[:MAX_TEXT_CHARS].splitlines()):
        for family, code, excerpt in match_line(compiled, line):
            entry = family.lookup(code)
            key = (family.id, (entry.code if entry else code).lower())
            if key in seen:
                continue
            seen.add(key)
            matches.append(explain(family, code, excerpt, vocab, lang))
    return matches
