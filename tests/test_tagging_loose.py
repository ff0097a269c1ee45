"""Names written with one modifier inside them (incidentlib/tagging/loose.py), and the links the tagger makes of them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from conftest import small_library

from incidentlib import Library
from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.models import InferenceMethod
from incidentlib.tagging.loose import LooseNames
from incidentlib.tagging.tagger import ALIAS_CONFIDENCE, LOOSE_ALIAS_CONFIDENCE, ConceptTagger, incident_text


@pytest.fixture(scope="module")
def loose(library: Library) -> LooseNames:
    return LooseNames(library.vocab)


def found(loose: LooseNames, text: str) -> dict[str, str]:
    return {match.concept_id: text[match.start:match.end] for match in loose.find(text)}


def test_a_name_with_a_modifier_inside_is_found(library: Library, loose: LooseNames) -> None:
    assert "bad config" in library.vocab.get("configuration-change").names()  # the name the cases below qualify
    assert found(loose, "A bad firewall config blocked the site.") == {"configuration-change": "bad firewall config"}
    assert found(loose, "Two bad BGP configs were pushed.")["configuration-change"] == "bad BGP configs"  # plural too
    match = loose.find("An incorrect MySQL configuration lost data.")[0]
    assert (match.concept_id, match.kind, match.name) == ("configuration-change", "cause", "incorrect configuration")


@pytest.mark.parametrize("text", [
    "It was bad and config files were lost.",  # a function word joins two phrases
    "The bad old firewall config.",  # two words inside
    "The result was bad. Config files were lost.",  # a sentence ends inside
    "The result was bad, config files were lost.",
    "A bad config was pushed.",  # the name written whole is the exact recogniser's
])
def test_no_loose_match_across_phrases_or_for_the_name_written_whole(loose: LooseNames, text: str) -> None:
    assert "configuration-change" not in found(loose, text)


def test_concepts_to_skip_are_not_looked_for(loose: LooseNames) -> None:
    text = "A bad firewall config blocked the site."
    assert loose.find(text, skip={"configuration-change"}) == []


def test_the_tagger_proposes_a_loose_name_and_prefers_the_name_written_whole(library: Library) -> None:
    tagger = ConceptTagger(library.vocab)  # the alias view alone, as the importer uses it
    loose_link = next(link for link in tagger.infer(["A bad firewall config blocked the site."])[0]
                      if link.concept == "configuration-change")
    assert loose_link.method == InferenceMethod.loose_alias and loose_link.confidence == LOOSE_ALIAS_CONFIDENCE
    assert "bad firewall config" in loose_link.evidence
    whole = next(link for link in tagger.infer(["A bad firewall config, a bad config."])[0] if link.concept == "configuration-change")
    assert whole.method == InferenceMethod.alias and whole.confidence == ALIAS_CONFIDENCE  # the name written whole first


def test_a_loose_link_is_stored_exported_and_queried_as_such(tmp_path: Path, data_dir: Path) -> None:
    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    source = tmp_path / "list.md"
    source.write_text("# Postmortems\n\n- [Example](https://example.org/pm/1). A bad firewall config blocked every "
                      "request for an hour.\n", encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.markdown))
    stored = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    link = next(link for link in stored["inferred"] if link["concept"] == "configuration-change")
    assert link["method"] == "loose-alias" and "bad firewall config" in link["evidence"]
    assert "causes" not in stored  # inferred, never curated
    rows = Library.open(target).sparql(
        f"SELECT ?method WHERE {{ ?i dcterms:identifier '{report.accepted[0].id}' ; il:inference ?q . "
        "?q il:concept ?c ; il:inferenceMethod ?method . FILTER(STRENDS(STR(?c), 'configuration-change')) }")
    assert [str(row["method"]) for row in rows.rows] == ["loose-alias"]


def test_the_fast_path_finds_what_every_pattern_finds(library: Library, loose: LooseNames) -> None:
    """``find`` tries a name only where its first word starts; ``reference_find`` searches every name's pattern."""
    texts = [incident_text(incident, lang) for incident in library.incidents() for lang in ("en", "ko")]
    rng = random.Random(7)
    names = [name for concept in library.vocab for name in concept.names() if name and name.isascii() and " " in name]
    fillers = ["firewall", "MySQL", "and", "old", ",", ".", "BGP", "the", "İ", "ſ"]
    for _ in range(400):  # names with a word (or a function word, or punctuation) put inside, in random company
        parts = rng.choice(names).split()
        cut = rng.randrange(1, len(parts))
        inner = " ".join([*parts[:cut], rng.choice(fillers), *parts[cut:]])
        texts.append(f"{rng.choice(fillers)} {inner}{rng.choice(['', 's', 'es', '.'])} {rng.choice(names)}")
    loose_found = 0
    for text in filter(None, texts):
        fast = loose.find(text)
        assert fast == loose.reference_find(text), text
        loose_found += len(fast)
    assert loose_found > 100  # the random names with a word inside are found, not only the library's few


def test_no_loose_match_across_a_line_break(loose: LooseNames) -> None:
    assert "configuration-change" not in found(loose, "Bad deploy\n\nConfig drift took down the fleet.")  # a title ends there
    assert found(loose, "Bad deploy config drift took down the fleet.")["configuration-change"] == "Bad deploy config"


def test_no_word_is_let_in_after_a_negating_word(library: Library, loose: LooseNames) -> None:
    assert "no connectivity" in library.vocab.get("network-unreachable").names()
    assert "network-unreachable" not in found(loose, "The staff had no backup connectivity.")  # not "no connectivity"


@pytest.mark.parametrize("text", [
    "Two GPU AND drivers crashed.",  # a function word in capitals, beside a name in capitals
    "The bad NOT config.",
    "The bad never config.",  # a negating word is no modifier
    "The bad wasn't config.",  # nor a contraction
    "Bad deploy\rConfig drift.",  # any line break
    "Bad deploy\u2028Config drift.",
])
def test_no_function_or_negating_word_nor_any_line_break_in_a_gap(loose: LooseNames, text: str) -> None:
    assert not {"gpu-driver", "configuration-change"} & set(found(loose, text))
    assert loose.find(text) == loose.reference_find(text)


def test_a_name_in_capitals_takes_its_plural_only_as_written(loose: LooseNames) -> None:
    assert found(loose, "Two GPU kernel drivers crashed.")["gpu-driver"] == "GPU kernel drivers"
    assert "gpu-driver" not in found(loose, "Two gpu kernel driverS crashed.")


def test_a_name_whose_first_word_recurs_inside_it_is_found_on_both_paths(loose: LooseNames) -> None:
    """A match may start inside an earlier one (here the first "model" starts the name written whole)."""
    text = "model hub and model files hub and model files"
    assert loose.find(text) == loose.reference_find(text) != []
    assert loose.find(text + " İ") == loose.find(text)  # the reference path, taken for a case-folding character


def test_the_open_gap_pattern_gives_the_strict_patterns_match_at_every_start() -> None:
    """A gap's word is captured and checked after the match (``_OPEN_GAP``), with the strict pattern matched where a
    barred word was captured: at every start, the same match as the strict pattern's, on names and texts made to
    hold function words, negations, repeated words and capitals in and around their gaps."""
    from incidentlib.tagging.loose import _OPEN_GAP, _compile, _Entry, _open_match

    names = ["bad config", "disk full of", "out of memory", "GPU kernel driver", "no route to host", "full full disk"]
    vocabulary = ["bad", "config", "disk", "full", "of", "out", "memory", "GPU", "gpu", "kernel", "driver", "drivers",
                  "no", "route", "to", "host", "the", "and", "not", "wasn't", "FIREWALL", "old", "Of", "THE", "configs"]
    rng = random.Random(11)
    fell_back = decided = 0
    for name in names:
        entry = _Entry(name, "c", "cause", frozenset(name.lower().split()), name.lower().split()[-1], name.split()[0].lower())
        strict, open_pattern = _compile(entry), _compile(entry, _OPEN_GAP)
        for _ in range(300):  # the name's words in order, each followed by up to two other words or itself again
            words = [rng.choice([*vocabulary, *name.split()])]
            for part in name.split():
                words += [part, *rng.choices([part, *vocabulary], k=rng.randrange(0, 3))]
            text = " ".join(words)
            for start in range(len(text)):
                expected = strict.match(text, start)
                got = _open_match(open_pattern, lambda strict=strict: strict, text, start)  # type: ignore[misc]
                assert (got and got.span()) == (expected and expected.span()), (name, text, start)
                direct = open_pattern.match(text, start)
                fell_back += direct is not None and (expected is None or direct.span() != expected.span())
                decided += direct is not None and expected is not None and direct.span() != expected.span()
    assert fell_back > 100  # barred words were met in gaps, and the strict pattern decided there
    assert decided > 0  # including where it matched otherwise ("disk full [full] of", not "disk [full] full [of] of")
