from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incidentlib import LibraryError, load_library
from incidentlib.loader import check_library
from incidentlib.models import ConceptKind

SEED_IDS = ["IL-0021", "IL-0025", "IL-0126", "IL-0133", "IL-0134"]


def edit(path: Path, **changes: object) -> None:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc.update(changes)
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")


def problems_of(root: Path) -> list[str]:
    _, problems = check_library(root)
    return [str(p) for p in problems]


def test_bundled_library_is_valid_and_complete(data_dir: Path) -> None:
    data, problems = check_library(data_dir)
    assert problems == []
    assert data is not None
    assert len(data.incidents) >= 25
    for seed in SEED_IDS:
        assert seed in data.incidents
    for kind in (ConceptKind.component, ConceptKind.cause, ConceptKind.symptom):
        assert len(data.vocab.ids(kind)) >= 20


def test_every_incident_is_bilingual_and_sourced(library) -> None:
    for incident in library.incidents():
        assert incident.title.en and incident.title.ko, incident.id
        assert incident.summary.en and incident.summary.ko, incident.id
        assert incident.sources, incident.id


def test_seed_incident_carries_its_signals(library) -> None:
    imbue = library.get("IL-0025")
    texts = " ".join(s.text for s in imbue.signals)
    assert "limited width: x4 < x16" in texts
    assert "Watchdog caught collective operation timeout" in texts
    assert imbue.body.en and imbue.body.ko
    assert imbue.lessons


def test_content_hash_changes_with_data(library_copy: Path) -> None:
    before = load_library(library_copy).content_hash
    path = library_copy / "incidents" / "IL-0025.yaml"
    edit(path, severity="sev2")
    assert load_library(library_copy).content_hash != before


def test_unknown_concept_is_reported_with_suggestion(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", components=["infiniband-fabrc", "nccl"])
    found = problems_of(library_copy)
    assert any("incidents/IL-0025.yaml: components[0]" in p and "infiniband-fabric" in p and "did you mean" in p for p in found)


def test_label_as_id_is_suggested(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", causes=["Operator error"])
    found = problems_of(library_copy)
    assert any("causes[0]" in p and "'human-error'" in p for p in found)


def test_wrong_kind_is_reported(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", causes=["nccl"])
    assert any("causes[0]" in p and "is a component, not a cause" in p for p in problems_of(library_copy))


def test_duplicate_incident_id(library_copy: Path) -> None:
    src = library_copy / "incidents" / "IL-0025.yaml"
    (library_copy / "incidents" / "IL-0999.yaml").write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    found = problems_of(library_copy)
    assert any("IL-0999.yaml: id" in p and "duplicate incident id 'IL-0025'" in p for p in found)
    assert any("does not match the file name" in p for p in found)


def test_bad_dates(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", date="2024-02-30")
    edit(library_copy / "incidents" / "IL-0126.yaml", date="June 2021")
    found = problems_of(library_copy)
    assert any("IL-0025.yaml: date" in p and "not a real calendar date" in p for p in found)
    assert any("IL-0126.yaml: date" in p and "YYYY-MM-DD" in p for p in found)


def test_missing_required_language(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", title={"en": "Only English"})
    assert any("IL-0025.yaml: title" in p and "missing required language(s): ko" in p for p in problems_of(library_copy))


def test_bad_url(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", sources=[{"url": "not a url", "title": "x"}])
    assert any("IL-0025.yaml: sources.0.url" in p for p in problems_of(library_copy))


def test_unknown_field_and_bad_yaml_and_related(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", sumary={"en": "typo"})
    edit(library_copy / "incidents" / "IL-0126.yaml", related=[{"id": "IL-9999", "reason": {"en": "x"}}])
    (library_copy / "incidents" / "IL-0133.yaml").write_text("id: [unclosed\n", encoding="utf-8")
    found = problems_of(library_copy)
    # every problem is reported at once, each naming file and field
    assert any("IL-0025.yaml: sumary: unknown field" in p for p in found)
    assert any("IL-0126.yaml: related[0].id: unknown incident 'IL-9999'" in p for p in found)
    assert any("IL-0133.yaml: not valid YAML" in p for p in found)


def test_vocab_problems(library_copy: Path) -> None:
    path = library_copy / "vocab" / "components.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["concepts"][0]["broader"] = "no-such-thing"
    doc["concepts"].append(dict(doc["concepts"][1]))  # duplicate id
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    found = problems_of(library_copy)
    assert any("broader" in p and "unknown concept 'no-such-thing'" in p for p in found)
    assert any("duplicate concept id" in p for p in found)


def test_a_cased_name_must_be_one_of_the_concepts_names(library_copy: Path) -> None:
    path = library_copy / "vocab" / "components.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    power = next(concept for concept in doc["concepts"] if concept["id"] == "power")
    power["cased"] = ["UPS", "ups"]  # the name as written is UPS; "ups" is not a name of the concept
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    found = [p for p in problems_of(library_copy) if "components.yaml" in p]
    assert any("cased" in p and "'ups'" in p and "not among the concept's labels and aliases" in p for p in found), found


def test_load_library_refuses_broken_library(library_copy: Path) -> None:
    edit(library_copy / "incidents" / "IL-0025.yaml", org="imbu")
    with pytest.raises(LibraryError) as info:
        load_library(library_copy)
    assert "did you mean 'imbue'" in str(info.value)
    assert info.value.problems


def test_missing_directory(tmp_path: Path) -> None:
    _, found = check_library(tmp_path / "nowhere")
    assert found and "does not exist" in found[0].message
    export = tmp_path / "tickets.csv"
    export.write_text("title,org\nDisk full,acme\n", encoding="utf-8")
    _, found = check_library(export)
    assert found and found[0].message.startswith("a file, not a library directory")
    assert "incidentlib import FILE --into DIR" in found[0].message


def test_a_wrong_shape_does_not_hide_the_wrong_references(library_copy: Path) -> None:
    """A bad date used to stop the check there: the unknown organisation and component came only once it was fixed,
    and every record linking to the misshapen one was said to link to an unknown incident."""
    edit(library_copy / "incidents" / "IL-0025.yaml", date="2026-02-30", org="awz", components=["gpuu"])
    found = problems_of(library_copy)
    assert any("IL-0025.yaml: date: date '2026-02-30' is not a real calendar date" in p for p in found)
    assert any("IL-0025.yaml: org: unknown organization 'awz' (did you mean 'aws'" in p for p in found)
    assert any("IL-0025.yaml: components[0]: unknown component 'gpuu'" in p for p in found)
    assert not any("unknown incident 'IL-0025'" in p for p in found)  # it is there, only misshapen
    assert len(found) == 3, found
