"""Concepts from the error messages of the signal table (incidentlib/tagging/signals.py), proposed by the tagger."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import small_library

from incidentlib import Library
from incidentlib.errors import ImportFailed
from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.models import InferenceMethod
from incidentlib.tagging.signals import SignalConcepts
from incidentlib.tagging.tagger import SIGNAL_CONFIDENCE, ConceptTagger

XID_79 = "[ 8812.442113] NVRM: Xid (PCI:0000:b3:00): 79, pid=2421, name=python, GPU has fallen off the bus."
BACK_OFF = "Warning  BackOff  kubelet  Back-off restarting failed container trainer in pod train-7f9"
TICKET = ('{"title": "Trainer pod keeps restarting", "org": "example", "source_url": "https://tickets.example.org/17", '
          '"body": "' + BACK_OFF + '"}\n')


@pytest.fixture(scope="module")
def signals(library: Library) -> SignalConcepts:
    return library.signal_concepts


def test_a_known_code_gives_its_family_and_code_concepts(library: Library, signals: SignalConcepts) -> None:
    found = {s.concept_id: s for s in signals.find(f"training stopped\n{XID_79}\nrank 3 exited")}
    xid = next(f for f in library.signal_table.families if f.id == "xid")
    entry = xid.lookup("79")
    assert entry is not None
    expected = {*xid.components, *xid.symptoms, *entry.components, *entry.symptoms}
    assert set(found) == expected and "gpu-fell-off-bus" in found
    assert entry.causes and not set(entry.causes) & set(found)  # what usually lies behind it is not what the text says
    assert {s.signal for s in found.values()} == {"xid:79"}
    assert all(s.excerpt.startswith("[ 8812.442113] NVRM: Xid") for s in found.values())  # the line, not the text around it
    assert {s.kind.value for s in found.values()} == {"component", "symptom"}
    assert found["gpu-fell-off-bus"].kind.value == library.vocab.get("gpu-fell-off-bus").kind.value


def test_a_kubelet_message_gives_the_event_reason_concepts(signals: SignalConcepts) -> None:
    found = {s.concept_id: s.signal for s in signals.find(BACK_OFF)}
    assert found and set(found.values()) == {"k8s-event:BackOff"}
    assert {"kubernetes", "job-failure"} <= set(found)


@pytest.mark.parametrize("message, signal", [
    ("Back-off restarting failed container trainer in pod train-7f9_default(3f2a)", "k8s-event:BackOff"),
    ("0/8 nodes are available: 8 Insufficient nvidia.com/gpu.", "k8s-event:FailedScheduling"),
    ("Liveness probe failed: HTTP probe failed with statuscode: 500", "k8s-event:Unhealthy"),
    ('Failed to pull image "registry.example/trainer:7": rpc error: code = NotFound', "k8s-event:ErrImagePull"),
    ("The node was low on resource: memory. Container trainer was using 81Gi.", "k8s-event:Evicted"),
    ('MountVolume.SetUp failed for volume "ckpt" : mount failed: exit status 32', "k8s-event:FailedMount"),
], ids=["back-off", "scheduling", "probe", "image", "eviction", "mount"])
def test_an_event_message_without_its_reason_gives_the_reasons_concepts(library: Library, signals: SignalConcepts,
                                                                          message: str, signal: str) -> None:
    """A line pasted from a log or from `kubectl describe`'s Message column has the kubelet's or scheduler's wording,
    not the event's reason: it is read as that reason."""
    found = {s.concept_id: s.signal for s in signals.find(message)}
    assert found and set(found.values()) == {signal}
    family = next(f for f in library.signal_table.families if f.id == "k8s-event")
    entry = family.lookup(signal.split(":")[1])
    assert entry is not None and set(found) == {*family.components, *family.symptoms, *entry.components, *entry.symptoms}


def test_text_without_a_signal_gives_nothing_and_skipped_concepts_are_not_given(signals: SignalConcepts) -> None:
    assert signals.find("The deploy went out on Tuesday and nobody noticed for an hour.") == []
    assert signals.find("") == []
    assert "gpu-fell-off-bus" not in {s.concept_id for s in signals.find(XID_79, skip={"gpu-fell-off-bus"})}


def test_the_tagger_proposes_signal_links_and_prefers_a_name_written(library: Library, signals: SignalConcepts) -> None:
    without = {link.concept for link in ConceptTagger(library.vocab).infer([BACK_OFF])[0]}
    links = {link.concept: link for link in ConceptTagger(library.vocab, signals=signals).infer([BACK_OFF])[0]}
    assert "job-failure" not in without and "job-failure" in links  # the message names no symptom
    failure = links["job-failure"]
    assert failure.method == InferenceMethod.signal and failure.confidence == SIGNAL_CONFIDENCE
    assert "Back-off restarting failed container" in failure.evidence
    gpu = {link.concept: link for link in ConceptTagger(library.vocab, signals=signals).infer([XID_79])[0]}["gpu"]
    assert gpu.method == InferenceMethod.alias  # "GPU" is written in the line: the name comes first


@pytest.mark.slow
def test_pasted_log_lines_get_the_signal_concepts_in_similar(search_library: Library) -> None:
    concepts, inferred = search_library._search_service.text_concepts(BACK_OFF)
    assert "job-failure" in concepts and "job-failure" in inferred  # from the table: the line names no symptom
    results = search_library.similar(text=BACK_OFF, k=10).results
    sharing = [r.id for r in results if "job-failure" in {c.id for c in r.why.shared_concepts}]
    assert sharing  # explained as a shared concept
    assert all("job-failure" in search_library.get(i).symptoms or "job-failure" in
               {link.concept for link in search_library.get(i).proposed()} for i in sharing)


def test_an_imported_log_line_is_stored_exported_and_queried_as_signal(tmp_path: Path, data_dir: Path) -> None:
    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    source = tmp_path / "tickets.jsonl"
    source.write_text(TICKET, encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl))
    incident_id = report.accepted[0].id
    stored = yaml.safe_load((target / "incidents" / f"{incident_id}.yaml").read_text(encoding="utf-8"))
    link = next(link for link in stored["inferred"] if link["concept"] == "job-failure")
    assert link["method"] == "signal" and link["confidence"] == SIGNAL_CONFIDENCE
    assert "symptoms" not in stored  # inferred, never curated
    rows = Library.open(target).sparql(
        f"SELECT ?method WHERE {{ ?i dcterms:identifier '{incident_id}' ; il:inference ?q . "
        "?q il:concept ?c ; il:inferenceMethod ?method . FILTER(STRENDS(STR(?c), 'job-failure')) }")
    assert [str(row["method"]) for row in rows.rows] == ["signal"]


def test_an_import_into_a_library_with_a_broken_signal_table_names_the_file(tmp_path: Path, data_dir: Path) -> None:
    target = small_library(tmp_path / "lib", data_dir, ["IL-0101"])
    table = target / "diagnosis" / "signals.yaml"
    table.parent.mkdir(exist_ok=True)
    table.write_text("version: 1\nfamilies: []\n", encoding="utf-8")
    source = tmp_path / "tickets.jsonl"
    source.write_text(TICKET, encoding="utf-8")
    with pytest.raises(ImportFailed, match=r"signals\.yaml"):
        run_import(source, target, ImportOptions(format=ImportFormat.jsonl))
    assert sorted(p.name for p in (target / "incidents").iterdir()) == ["IL-0101.yaml"]  # nothing written


def test_a_pattern_anchored_to_a_line_is_found_on_any_line(library: Library) -> None:
    from incidentlib.analysis.families import compile_table
    from incidentlib.analysis.tables import SignalTable

    table = SignalTable.model_validate({"version": 1, "families": [{
        "id": "drain", "label": {"en": "node drain", "ko": "노드 드레인"}, "default": {"en": "{code}", "ko": "{code}"},
        "patterns": [{"regex": r"^DRAIN (?P<code>\w+)$"}], "symptoms": ["job-failure"], "components": ["kubernetes"]}]})
    signals = SignalConcepts(compile_table(table), library.vocab)
    found = {s.concept_id: s.signal for s in signals.find("the scheduler said\nDRAIN node17\nand stopped")}
    assert found == {"kubernetes": "drain:node17", "job-failure": "drain:node17"}
    assert signals.find("DRAIN node17 and more on the line") == []
