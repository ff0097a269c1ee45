import random
import re

import pytest

import incidentlib.search.tokenize as tk
from incidentlib.search.chunks import incident_chunks
from incidentlib.search.tokenize import tokenize


def test_korean_particles_are_stripped() -> None:
    stems = [tokenize(word)[0] for word in ("타임아웃이", "타임아웃으로", "타임아웃", "타임아웃에서", "타임아웃을")]
    assert set(stems) == {"타임아웃"}
    assert tokenize("학습이 멈췄다")[0] == "학습"


def test_short_korean_words_keep_their_last_syllable() -> None:
    # a stem is never cut below two syllables: 장애 / 장애가 must both give 장애
    assert tokenize("장애")[0] == "장애"
    assert tokenize("장애가")[0] == "장애"


def test_error_tokens_survive() -> None:
    tokens = tokenize("OpType=_ALLGATHER_BASE, Timeout(ms)=600000")
    assert "_allgather_base" in tokens and "allgather" in tokens and "600000" in tokens
    assert "xid79" in tokenize("Xid 79")
    # as the kernel writes it, with the device between the two words (and an SXid's five digits are a count)
    nvrm = tokenize("[ 1834567.123456] NVRM: Xid (PCI:0000:c3:00): 79, pid=99812, name=torchrun, GPU has fallen off the bus.")
    assert "xid79" in nvrm and "<pci>" in nvrm and "pci" not in nvrm
    assert "xid79" in tokenize("NVRM: Xid (0000:3b:00): 79, pid=1")  # older drivers: no "PCI:"
    assert "x4<x16" in tokenize("limited width: x4 < x16")
    assert "403" in tokenize("403 Forbidden")


def test_english_plurals_and_stopwords() -> None:
    assert tokenize("the timeouts") == ["timeout"]
    assert "bus" in tokenize("bus")  # not turned into "bu"


def test_chunks_cover_both_languages_and_signals(library) -> None:
    incident = library.get("IL-0025")
    chunks = incident_chunks(incident, library.vocab)
    kinds = {(c.kind, c.lang) for c in chunks}
    assert {("title", "en"), ("title", "ko"), ("body", "en"), ("body", "ko"), ("concepts", "ko"), ("signal", "raw")} <= kinds
    assert len({c.id for c in chunks}) == len(chunks)
    assert any("limited width: x4 < x16" in c.text for c in chunks if c.kind == "signal")
    assert all(len(c.text) <= 1300 for c in chunks)


def test_particle_glued_to_latin_word_is_not_a_token():
    tokens = tokenize("Meta의 GPU를 Xid 79가 멈췄다")
    assert {"meta", "gpu", "xid79"} <= set(tokens)
    assert not {"의", "를", "가"} & set(tokens)
    # a standalone Hangul word that happens to equal a particle is kept
    assert "이" in tokenize("이 문제")


def _reference_word_tokens(text: str) -> list[str]:
    # the rule the one-scan pattern implements, written with a look-behind: a Hangul run preceded by a
    # character that is neither white space nor Hangul is glued, and a glued run that is a particle is dropped
    tokens: list[str] = []
    for glued, word in re.findall(r"(?<=[^\s\uac00-\ud7a3])([\uac00-\ud7a3]+)|([\uac00-\ud7a3]+|"
                                  r"[A-Za-z0-9_]+(?:[.\-/][A-Za-z0-9_]+)*)", text):
        if glued and glued in tk._PARTICLE_SET:
            continue
        tokens.extend(tk._word_tokens(glued or word))
    return tokens


def test_word_scan_follows_the_glued_particle_rule() -> None:
    pieces = ["장애", "가", "를", "이", "의", "회의", "으로", "타임아웃", "GPU", "x4", "Xid", "79", "a.b", "a.", "-", "/", "_",
              "(", ")", "'", "é", "中", " ", "  ", "\n", "를.", "Meta", "0x1f"]
    rng = random.Random(7)
    texts = ["Meta의 GPU를 (장애)를 a.를 'x'가 이 문제", *("".join(rng.choices(pieces, k=rng.randint(0, 10))) for _ in range(3000))]
    glued_dropped = 0
    for text in texts:
        words = tk._WORDS.findall(text) if tk._HANGUL.search(text) else tk._LATIN_WORDS.findall(text)
        found = [token for match in words for token in tk._match_tokens(match)]
        reference = _reference_word_tokens(text)
        assert found == reference, text
        glued_dropped += len(re.findall(r"[^\s\uac00-\ud7a3](?:가|를|이|의|으로)(?![\uac00-\ud7a3])", text))
    assert glued_dropped > 100  # the generated texts do glue particles to words and marks


@pytest.mark.parametrize(("text", "family"), [
    ("pod OOMKilled", "<oom_kill>"), ("Out of memory: Killed process 4412 (python)", "<oom_kill>"),
    ("the OOM killer took the trainer", "<oom_kill>"), ("it was oom-killed twice", "<oom_kill>"),
    ("Back-off restarting failed container", "<k8s_backoff>"), ("CrashLoopBackOff", "<k8s_backoff>"),
    ("the exporter was in a crash loop", "<k8s_backoff>"), ("image pull backoff on every new node", "<k8s_backoff>"),
])
def test_an_error_family_is_one_feature_however_it_is_written(text: str, family: str) -> None:
    # the message as the system logs it and as a person describes it match each other
    assert family in tokenize(text)


@pytest.mark.parametrize("text", ["a crash dump was written", "the docker image pulled fine", "zoom killed it"])
def test_words_near_a_family_are_not_it(text: str) -> None:
    assert not [token for token in tokenize(text) if token in ("<oom_kill>", "<k8s_backoff>")]
