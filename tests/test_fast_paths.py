"""The import's fast paths give what the straightforward methods give.

The concept recognizer finds candidate names in one pass and confirms them at the found
offsets; ``reference_spans`` searches every name's pattern over the whole text.  The
tokenizer skips a log-token pattern whose gate fails; ``gates=False`` runs them all.  The
duplicate index reuses a record's LSH keys from its check when the record is added.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import small_library

from incidentlib import Library
from incidentlib.dedupe import BANDS, ROWS
from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.importing.duplicates import (
    SIMILARITY_THRESHOLD,
    Duplicate,
    DuplicateIndex,
    band_keys,
    fingerprint,
    jaccard,
)
from incidentlib.search.concepts import ConceptRecognizer
from incidentlib.search.tokenize import tokenize
from incidentlib.tagging.tagger import incident_text

LOG_LINES = [
    "2024-03-01T12:00:01Z ip-10-0-3-7.ec2.internal kernel: NVRM: Xid 79, pid=4412, GPU has fallen off the bus",
    "[ 1234.567890] mlx5_core 0000:3b:00.0: ibv_wc_retry_exc_err on rank 12 seq=881 addr 0x7f3a9c00d000",
    "gpu-node-17 ProcessGroupNCCL Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, Timeout(ms)=600000) ran for 600351 ms",
    "HTTP/1.1 503 Service Unavailable from 192.168.0.10:8443 request 123e4567-e89b-12d3-a456-426614174000 at 12:34:56.789",
    "pod trainer-0 CrashLoopBackOff after OOMKilled; status code: 404 Not Found; link x4 < x16",
    "GPU를 Meta의 NCCL 타임아웃이 발생했다 worker-3 TID: 77 Rank 5 ſeq=3 pıd 9 RAN\u212a 2 İP 10.0.0.1",
]


def _library_texts(library: Library) -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {"en": [], "ko": []}
    for incident in library.incidents():
        for lang in texts:
            text = incident_text(incident, lang)
            if text:
                texts[lang].append(text)
    return texts


@pytest.fixture(scope="module")
def recognizer(library: Library) -> ConceptRecognizer:
    return ConceptRecognizer(library.vocab)


@pytest.mark.slow
def test_recognizer_matches_every_pattern_on_the_library_in_both_languages(library: Library, recognizer: ConceptRecognizer) -> None:
    found = {}
    for lang, texts in _library_texts(library).items():
        assert len(texts) > 100
        mentions = 0
        for text in texts:
            fast = recognizer.spans(text)
            assert fast == recognizer.reference_spans(text), text[:120]
            assert [(m.concept_id, m.kind) for m in recognizer.recognise(text)] == [(m.concept_id, m.kind) for m, _, _ in fast]
            mentions += len(fast)
        found[lang] = mentions
    assert found["en"] > 500 and found["ko"] > 500  # both languages are exercised, not only empty results


def test_recognizer_matches_every_pattern_on_edge_cases(recognizer: ConceptRecognizer) -> None:
    names = [name for name, _ in recognizer.names()]
    acronyms = [n for n in names if n.isascii() and n.isupper() and n.isalpha() and len(n) >= 3]
    assert acronyms
    acronym = acronyms[0]
    camel = recognizer.spans(f"Work{acronym} failed")
    assert camel and camel[0][0].matched == acronym and camel == recognizer.reference_spans(f"Work{acronym} failed")
    assert not recognizer.spans(f"work{acronym.lower()} failed")  # a CamelCase tail only in its written case
    rng = random.Random(12)
    glue = [" ", "", "x", "_", "-", "Work", "core", ".", "(", "한", "é", "\u212a", "\u0131", "1", "\n", "를 "]
    texts = [f"{LOG_LINES[2]} {LOG_LINES[5]}"]
    for _ in range(300):
        parts = rng.choices(names, k=rng.randint(1, 5))
        endings = ["", "", "s", "es", "S", "ss"]  # plural endings, and one a plural does not take
        texts.append("".join(rng.choice(glue) + rng.choice([p, p.lower(), p.upper(), p.title()]) + rng.choice(endings)
                             for p in parts) + rng.choice(glue))
    for text in texts:
        assert recognizer.spans(text) == recognizer.reference_spans(text), text


def test_names_are_recognised_in_the_english_plural(recognizer: ConceptRecognizer) -> None:
    def found(text: str) -> dict[str, str]:
        spans = recognizer.spans(text)
        assert spans == recognizer.reference_spans(text), text
        return {mention.concept_id: mention.matched for mention, _, _ in spans}

    assert found("Two config changes went out")["configuration-change"] == "config changes"  # the second word keyed
    assert found("after three power outages")["facility-power"] == "power outages"
    assert found("the GPUs fell off")["gpu"] == "GPUs"
    assert found("race conditions in the scheduler")["race-condition"] == "race conditions"
    assert found("two bugs")["software-bug"] == "bugs"
    assert "software-bug" not in found("bugsy")  # only the plural endings, then a word boundary
    assert "configuration-change" not in found("config changesets")
    assert found("network switches")["network-switch"] == "network switches"  # "es" after s, x, z, ch, sh
    assert "package-registry" not in found("named pipes")  # ... and only there: "pip" + "es" is another word
    assert "gpu" not in found("gpus") and "block-storage" not in found("sans serif")  # capitals: "s" as written only
    assert found("SANs")["block-storage"] == "SANs"
    every_name = {name for name, _ in recognizer.names()}
    organisations = [item.name for item in recognizer._names if item.kind == "organization" and item.name.isascii()
                     and item.name[-1].isalpha() and len(item.name) >= 3 and f"{item.name}s" not in every_name]
    assert organisations
    for name in organisations:  # an organisation's name has no plural
        assert all(mention.kind != "organization" or mention.matched != f"{name}s"
                   for mention, _, _ in recognizer.spans(f"the {name}s"))
    # a name that ends in a digit takes no plural ending: "Xid 79s" is not Xid 79
    digit_names = [name for name, _ in recognizer.names() if name[-1].isdigit() and name.isascii() and len(name) >= 4]
    assert digit_names
    name = digit_names[0]
    assert recognizer.spans(name) and not recognizer.spans(f"{name}s")


def test_cased_names_match_only_as_written(recognizer: ConceptRecognizer) -> None:
    def found(text: str) -> dict[str, str]:
        spans = recognizer.spans(text)
        assert spans == recognizer.reference_spans(text), text
        return {mention.concept_id: mention.matched for mention, _, _ in spans}

    # the bundled vocabulary lists UPS, VAST and PACE as cased: in lower case they are everyday words
    assert found("The UPS failed during the transfer")["power"] == "UPS"
    assert found("two UPSs tripped")["power"] == "UPSs"
    assert "power" not in found("Follow-ups included better alerting") and "power" not in found("large scale-ups")
    assert found("checkpoints on VAST stalled")["shared-filesystem"] == "VAST"
    assert "shared-filesystem" not in found("the vast majority of jobs")
    assert "georgia-tech" not in found("the slowest GPU sets the pace") and "georgia-tech" in found("PACE ran it")
    # a name that is not cased still matches in any case
    assert found("the psu died")["power"] == "psu"


def test_everyday_words_are_not_names_of_concepts(recognizer: ConceptRecognizer) -> None:
    """Words the bundled vocabulary once listed as names, which incident text mostly uses for something else."""
    def found(text: str) -> set[str]:
        spans = recognizer.spans(text)
        assert spans == recognizer.reference_spans(text), text
        return {mention.concept_id for mention, _, _ in spans}

    assert "kakao" not in found("다음 날에 걸쳐 복구됐다") and "kakao" in found("다음카카오 서비스가 멈췄다")
    assert "time-sync" not in found("engineers watched the run around the clock; wall-clock time lost")
    assert "time-sync" in found("a clock skew of two seconds") and "time-sync" in found("NTP stopped")
    assert "message-queue" not in found("more queue pairs per connection, one CUDA stream per rank")
    assert "message-queue" in found("the Kafka brokers fell behind")
    assert "monitoring" not in found("Logging in as a different user; the plugin kept logging warnings")
    assert "monitoring" in found("the logging pipeline dropped events") and "monitoring" in found("Prometheus was down")
    assert "block-storage" not in found("a large volume of requests") and "block-storage" in found("the EBS volume")
    assert "local-storage" not in found("hash polarization drive the design") and "database" not in found("the primary cause")
    # ... while the longer names a postmortem writes for the component still find it
    assert "database" in found("hit the integer limit on a primary key") and "message-queue" in found("job queues backed up")
    assert "block-storage" in found("a loss of 0.07% of volumes") and "local-storage" in found("two physical drives failed")
    assert "source-control" not in found("메타데이터 저장소에서 읽었다") and "source-control" in found("코드 저장소가 노출됐다")
    assert "package-registry" not in found("서비스 간 의존성 때문에") and "package-registry" not in found("a hidden dependency")


def test_an_xid_is_recognised_as_the_kernel_writes_it(recognizer: ConceptRecognizer) -> None:
    line = "[1834567.123456] NVRM: Xid (PCI:0000:c3:00): 79, pid=99812, name=torchrun"
    spans = recognizer.spans(line)
    assert spans == recognizer.reference_spans(line)
    assert {m.concept_id for m, _, _ in spans} >= {"gpu-fell-off-bus", "xid-errors"}
    assert "gpu-fell-off-bus" not in {m.concept_id for m, _, _ in recognizer.spans("Xid (PCI:0000:c3:00): 790")}
    older = "NVRM: Xid (0000:3b:00): 79, pid=1"  # older drivers write the device without "PCI:"
    assert "gpu-fell-off-bus" in {m.concept_id for m, _, _ in recognizer.spans(older)}
    for glued in ("Xid79", "xid79 seen"):  # the two words need something between them, on both paths
        assert recognizer.spans(glued) == recognizer.reference_spans(glued)
        assert "gpu-fell-off-bus" not in {m.concept_id for m, _, _ in recognizer.spans(glued)}


def _same_tokens_with_and_without_gates(texts: list[str]) -> int:
    placeholders = 0
    for text in texts:
        tokens = tokenize(text)
        assert tokens == tokenize(text, gates=False), text[:120]
        placeholders += sum(t.startswith("<") for t in tokens)
    return placeholders


def test_tokenizer_gates_do_not_change_tokens_of_log_lines(library: Library) -> None:
    texts = [*LOG_LINES, *(signal.text for incident in library.incidents() for signal in incident.signals)]
    assert _same_tokens_with_and_without_gates(texts) > 50  # the gated patterns did fire


@pytest.mark.slow
def test_tokenizer_gates_do_not_change_tokens_of_the_library(library: Library) -> None:
    texts = [text for lang_texts in _library_texts(library).values() for text in lang_texts]
    assert _same_tokens_with_and_without_gates(texts) > 0


def test_duplicate_index_keys_reused_from_the_check_are_the_keys_of_a_fresh_add(library: Library) -> None:
    texts = [f"{i.title.en} {i.summary.en}" for i in library.incidents()][:60]
    checked, added = DuplicateIndex(), DuplicateIndex()
    for number, text in enumerate(texts):
        urls, pair = [f"https://example.org/{number}"], [text, text.upper()]
        assert checked.find(urls, pair) is None
        checked.add(f"K{number}", urls, pair)  # the importer's order: find, then add the same texts
        added.add(f"K{number}", urls, pair)
    assert checked._buckets == added._buckets and len(checked._buckets) > 60 * 30  # 32 bands per record, few shared
    copy = " ".join(texts[7].split()[:-2])
    assert checked.find([], [copy]) == added.find([], [copy]) is not None
    score = jaccard(fingerprint(copy), fingerprint(texts[7]))
    assert checked.find([], [copy]) == Duplicate("K7", f"title and text {score:.0%} similar to K7")
    checked.add("again", ["https://example.org/again"], [texts[7]])  # a tie: the record added first is named
    assert checked.find([], [texts[7]]) == Duplicate("K7", "title and text 100% similar to K7")


def test_band_keys_are_equal_exactly_for_equal_bands_of_one_band_number() -> None:
    """A band's key is one integer made of its rows and its number: the same rows in the same band give the same key,
    a change in any one row (or the same rows in another band) another key."""
    rng = np.random.default_rng(5)
    signature = rng.integers(0, (1 << 31) - 1, size=BANDS * ROWS, dtype=np.uint64)
    keys = band_keys(signature)
    assert len(keys) == BANDS and all(isinstance(key, int) and 0 <= key < 1 << 64 for key in keys)
    assert band_keys(signature.copy()) == keys
    for band in range(BANDS):
        for row in range(ROWS):
            changed = signature.copy()
            changed[band * ROWS + row] += np.uint64(1)
            after = band_keys(changed)
            assert after[band] != keys[band] and after[:band] + after[band + 1:] == keys[:band] + keys[band + 1:]
    same_rows = np.tile(signature[:ROWS], BANDS)  # every band holds the same rows
    assert len(set(band_keys(same_rows))) == BANDS


def test_duplicate_check_among_many_candidates_is_the_best_of_every_pair(library: Library) -> None:
    """Records of two texts each, many reworded from one incident: every check names the first known record with the
    highest Jaccard of any of its texts with any of the new record's, as comparing them all pair by pair does."""
    rng = random.Random(11)
    bases = [(f"{i.title.en} {i.summary.en}", i.summary.en or "") for i in library.incidents()][:12]
    index = DuplicateIndex()
    known: list[tuple[str, list[frozenset[str]]]] = []
    named, most_candidates = 0, 0
    for number in range(144):
        first, second = bases[number % 12]
        texts = [" ".join(w for w in first.split() if rng.random() > 0.15),
                 " ".join(w for w in second.split() if rng.random() > 0.3) if number % 3 else ""]
        prints = [fingerprint(text) for text in texts if text]
        scores = [max(jaccard(mine, theirs) for mine in prints for theirs in their_prints)
                  for _, their_prints in known]
        top = max(scores, default=0.0)
        expected = known[scores.index(top)][0] if top >= SIMILARITY_THRESHOLD else None
        duplicate = index.find([], texts)
        assert (duplicate.of if duplicate else None) == expected, number
        named += duplicate is not None
        most_candidates = max(most_candidates, sum(score > 0.3 for score in scores))
        index.add(f"K{number}", [], texts)  # every record is kept, so later ones have many near copies to weigh
        known.append((f"K{number}", prints))
    assert named > 100 and most_candidates >= 10


@pytest.mark.parametrize("enabled_before", [True, False])
def test_an_import_runs_with_the_cyclic_collector_paused_and_leaves_it_as_it_was(
        tmp_path: Path, data_dir: Path, enabled_before: bool) -> None:
    import gc

    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps({"title": f"Queue {n} stalled", "summary": f"Consumers of queue {n} stalled.",
                                          "org": "Zeta Labs", "url": f"https://zeta.example/{n}"}) + "\n" for n in range(3)),
                      encoding="utf-8")
    seen: list[bool] = []
    (gc.enable if enabled_before else gc.disable)()
    try:
        report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, dry_run=True),
                            progress=lambda done, total: seen.append(gc.isenabled()))
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert len(report.accepted) == 3 and seen == [False, False, False]


def test_the_import_writes_each_record_as_the_pure_python_yaml_emitter_does(library: Library) -> None:
    """The same file for every bundled record, and text that reads back the same for awkward values."""
    import yaml

    from incidentlib.importing.yaml_out import dump_record

    documents = [incident.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
                 | {"id": incident.id, "status": incident.status.value, "org": incident.org}
                 for incident in library.data.incidents.values()]
    awkward = ["line one\nline two", "trailing space \n", "tab\there", "# not a comment", "- not a list", "yes",
               "2024-01-05", "null", "'quoted'", 'say "hi"', "x" * 250, "한국어 본문과 English 혼합", "emoji \U0001F680",
               "\u2028separator", "control \x07 bell", "colon: inside", "{braces}", ""]
    documents.append({"id": "IL-9999", "title": {"en": awkward[0], "ko": awkward[11]},
                      "signals": [{"text": text, "note": text} for text in awkward], "tags": awkward})
    for document in documents:
        text = dump_record(document)
        assert yaml.safe_load(text) == document  # every text reads back as it was
        if document["id"] != "IL-9999":  # libyaml escapes a character beyond the BMP (an emoji) where PyYAML does not
            assert text == yaml.safe_dump(document, allow_unicode=True, sort_keys=False, width=100), document["id"]


def test_the_record_dumper_writes_what_the_safe_dumper_writes_without_anchors(library: Library) -> None:
    """Nodes made directly and implicit tags remembered: the libyaml safe dumper's text for every bundled record and
    for scalars whose plain form reads as another type; a repeated list is written twice, not as an alias."""
    import yaml

    from incidentlib.importing.yaml_out import REMEMBERED_SCALAR_CHARS, RecordDumper, dump_record

    def safe(document: object) -> str:
        return str(yaml.dump(document, Dumper=yaml.CSafeDumper, allow_unicode=True, sort_keys=False, width=100))

    documents: list[dict[str, object]] = [
        incident.model_dump(mode="json", exclude_none=True, exclude_defaults=True) | {"id": incident.id}
        for incident in library.data.incidents.values()]
    lookalikes = ["yes", "No", "on", "~", "null", "1", "0o17", "0x1F", "1_000", "1.5", ".inf", "-.NaN", "1e3",
                  "2024-01-05", "2024-01-05 10:00:00", "12:30:45", "<<", "=", "", " ", "true ", "x" * REMEMBERED_SCALAR_CHARS,
                  "9" * (REMEMBERED_SCALAR_CHARS + 1)]
    documents.append({"id": "lookalikes", "values": lookalikes, "again": lookalikes[::-1],
                      "scalars": [1, -2, 0.5, 1e20, float("inf"), True, False, None], "empty": {"list": [], "map": {}},
                      "nested": [{"a": ["b", {"c": "d"}]}, []]})
    RecordDumper._implicit_tags.clear()
    for _ in range(2):  # the second pass answers from the remembered tags
        for document in documents:
            assert dump_record(document) == safe(document), document["id"]
    assert RecordDumper._implicit_tags["yes"] == "tag:yaml.org,2002:bool"
    assert "9" * (REMEMBERED_SCALAR_CHARS + 1) not in RecordDumper._implicit_tags

    shared = ["gpu", "nccl"]
    text = dump_record({"components": shared, "tags": shared})
    assert "&" not in text and "*" not in text and yaml.safe_load(text) == {"components": shared, "tags": shared}
    assert "&id001" in safe({"components": shared, "tags": shared})  # what the generic representer would write


def test_a_rejected_record_keeps_the_vocabulary_an_accepted_one_added(tmp_path: Path, data_dir: Path) -> None:
    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    records = [
        {"title": "Queue stalled", "summary": "Consumers stalled after a deploy.", "org": "Zeta Labs",
         "url": "https://zeta.example/1", "tags": "queues"},
        {"title": "No link here", "summary": "Nothing to cite.", "org": "Zeta Labs", "tags": "queues; orphans"},
        {"title": "Also no link", "summary": "Nothing to cite either.", "org": "Omega Works"},
    ]
    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, maps=["tags=tags"], dry_run=True))
    assert len(report.accepted) == 1 and len(report.rejected) == 2
    assert report.new_organizations == ["zeta-labs"] and report.new_tags == ["queues"]


def test_korean_names_are_words_with_their_particles_not_parts_of_other_words(recognizer: ConceptRecognizer) -> None:
    def found(text: str) -> dict[str, str]:
        spans = recognizer.spans(text)
        assert spans == recognizer.reference_spans(text), text
        return {mention.concept_id: mention.matched for mention, _, _ in spans}

    # particles and endings glued after a name keep it, and the endings incident notes are written in
    assert "service-outage" in found("조용한 서비스 장애다.") and "job-failure" in found("파드 재시작됨")
    assert "dns-resolution-failure" in found("DNS 실패함") and "server-hardware" in found("서버쪽 문제")
    assert found("러스터에서 메타데이터 서버가 멈췄다")["shared-filesystem"] == "러스터"
    assert found("노드에서 재시작했다")["job-failure"] == "재시작"
    assert "server-hardware" in found("노드들이 빠졌다") and "server-hardware" in found("노드간 통신")
    # a name inside a longer word is not that name: Lustre in "cluster", Meta in "metadata", Ray in "upgrade"/"latency"
    assert "shared-filesystem" not in found("클러스터가 멈췄다")
    assert "meta" not in found("메타데이터가 손상됐다") and found("메타의 장애")["meta"] == "메타"
    assert "anyscale" not in found("업그레이드 후 레이턴시가 늘었다")
    assert "message-queue" not in found("업스트림 장애") and "software-bug" not in found("디버그 로그")
    # a name that starts in Latin letters keeps the Latin word boundary on that side, the Korean rule on the other
    latin_korean = [(name, concept) for name, concept in recognizer.names()
                    if name[0].isascii() and name[0].isalpha() and "\uac00" <= name[-1] <= "\ud7a3"]
    assert latin_korean
    name, concept = latin_korean[0]
    assert found(f"{name}가 멈췄다")[concept] == name
    assert concept not in found(f"X{name} 멈춤") and concept not in found(f"{name}데이터")


def test_error_messages_as_programs_print_them_name_their_symptom(recognizer: ConceptRecognizer) -> None:
    def found(text: str) -> set[str]:
        spans = recognizer.spans(text)
        assert spans == recognizer.reference_spans(text), text
        return {mention.concept_id for mention, _, _ in spans}

    assert "dns-resolution-failure" in found("dial tcp: lookup payments-db.prod.internal on 172.20.0.10:53: no such host")
    assert "dns-resolution-failure" in found("curl: (6) Could not resolve host: api.example.com")
    assert "dns-resolution-failure" in found("socket.gaierror: [Errno -3] Temporary failure in name resolution")
    assert "disk-full" in found("OSError: [Errno 28] No space left on device")
    assert "disk-full" in found("The node had condition: [DiskPressure]") and "disk-full" in found("디스크 공간 부족으로 쓰기 실패")
    assert "boot-loop" in found("파드가 크래시루프백오프 상태로 멈췄다")
