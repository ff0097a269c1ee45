"""Each signal pattern is searched only in a line holding one of the strings every match of it contains
(incidentlib/analysis/families.py, pattern_gate): the same matches, fewer searches."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from incidentlib.analysis.families import CompiledFamily, compile_table, lines_to_read, match_line, pattern_gate
from incidentlib.library import Library
from incidentlib.tagging.signals import SignalConcepts

EVAL_QUERIES = Path(__file__).resolve().parents[1] / "eval" / "queries.jsonl"


@pytest.mark.parametrize(("regex", "flags", "gate"), [
    (r"fallen off the bus", re.IGNORECASE, ("fallen off the bus",)),
    (r"\bfoo\d+barbaz", 0, ("barbaz",)),  # the longest required run
    (r"x(?:longer|bigger) y", 0, ("longer", "bigger")),  # one of a branch's strings
    (r"(?:optional)?tail", 0, ("tail",)),  # an optional group requires nothing
    (r"(?:ab|cdef)", 0, None),  # a branch with a string too short to test
    (r"\d+/\d+", 0, None),
    (r"(?:again)+ and", 0, ("again",)),  # a repeat of at least one requires its content
    (r"\bSXid\b", re.IGNORECASE, ("sxid",)),  # lowercase: lines are tested lowercased
])
def test_the_gate_is_what_every_match_contains(regex: str, flags: int, gate: tuple[str, ...] | None) -> None:
    assert pattern_gate(re.compile(regex, flags)) == gate


def _ungated(families: list[CompiledFamily]) -> list[CompiledFamily]:
    return [replace(f, patterns=tuple((p, code, None) for p, code, _ in f.patterns)) for f in families]


def _lines(library: Library) -> list[str]:
    lines = []
    for incident in library.data.incidents.values():
        for field in (incident.title, incident.summary, incident.body):
            lines.extend(line for code in ("en", "ko") for line in (field.get(code) or "").splitlines())
        lines.extend(signal if isinstance(signal, str) else signal.text for signal in incident.signals)
    lines.extend(json.loads(row)["query"] for row in EVAL_QUERIES.read_text(encoding="utf-8").splitlines() if row)
    return lines


def test_gated_matching_finds_what_searching_every_pattern_finds(data_dir: Path) -> None:
    library = Library.open(data_dir)
    gated = compile_table(library.signal_table)
    assert sum(gate is not None for family in gated for _, _, gate in family.patterns) >= 20  # nearly all have one
    everything = _ungated(gated)
    lines = _lines(library)
    # a line whose letters case-insensitive matching folds differently (the long s, the Kelvin sign, ı) is searched
    # by every pattern: its lowercased form would not hold the gate
    lines += ["X\u0131D 79 on gpu-3", "\u017fXid Fatal on the switch", "NCCL watchdog: Wor\u212aNCCL"]
    matched = [match_line(gated, line) for line in lines]
    assert matched == [match_line(everything, line) for line in lines]
    assert sum(1 for found in matched if found) >= 50  # the comparison covers many matching lines
    assert match_line(gated, "X\u0131D 79 on gpu-3")  # re folds the dotless i to i, str.lower() does not: kept
    concepts_gated, concepts_all = SignalConcepts(gated, library.vocab), SignalConcepts(everything, library.vocab)
    for incident in library.data.incidents.values():
        text = "\n".join(incident.body.get(code) or "" for code in ("en", "ko"))
        assert concepts_gated.find(text) == concepts_all.find(text)


def test_the_lines_left_unread_are_ones_no_pattern_matches(data_dir: Path) -> None:
    library = Library.open(data_dir)
    gated = compile_table(library.signal_table)
    everything = _ungated(gated)
    lines = _lines(library)
    read_total = 0
    for start in range(0, len(lines), 7):  # texts of seven lines, some with a signal, most without
        text = lines[start:start + 7]
        read = lines_to_read(gated, text)
        assert [line for line in text if line in read] == list(read)  # a subset, in order
        assert [line for line in text if match_line(everything, line)] == [line for line in read
                                                                          if match_line(everything, line)]
        read_total += len(read)
    assert 0 < read_total < len(lines) / 2  # most lines hold no gate's string and are not read
    # one line with a character re folds to an ASCII letter: every line is read
    folded = ["nothing here", "X\u0131D 79 on gpu-3"]
    assert lines_to_read(gated, folded) == folded
    # a family with a pattern without a gate: every line is read
    assert lines_to_read(everything, ["nothing here", "nor here"]) == ["nothing here", "nor here"]
    # each string found is placed on its own line, wherever it is in the text and however often
    one = [replace(gated[0], patterns=((re.compile("watchdog|stalled"), "x", ("watchdog", "stalled")),))]
    text = ["start", "Watchdog fired, watchdog again", "", "quiet", "the ring STALLED", "watchdog", "end"]
    assert lines_to_read(one, text) == ["Watchdog fired, watchdog again", "the ring STALLED", "watchdog"]
