"""Inferred links written into, and reviewed in, a real incident YAML file (incidentlib/tagging/store.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from incidentlib.errors import ReviewError
from incidentlib.models import ConceptKind, InferenceMethod, InferredLink, InferredStatus
from incidentlib.tagging.store import merge_inferred, review_links, write_inferred


def _link(concept: str, kind: ConceptKind, status: InferredStatus = InferredStatus.proposed) -> InferredLink:
    return InferredLink(concept=concept, kind=kind, evidence=f"words about {concept}", method=InferenceMethod.alias,
                        confidence=0.8, status=status)


@pytest.fixture()
def incident_file(tmp_path: Path, data_dir: Path) -> Path:
    target = tmp_path / "IL-0001.yaml"
    shutil.copy(data_dir / "incidents" / "IL-0001.yaml", target)
    return target


def test_merge_keeps_rejections_and_never_proposes_curated_concepts() -> None:
    existing = [_link("nvlink", ConceptKind.component, InferredStatus.rejected), _link("cuda", ConceptKind.component)]
    found = [_link("nvlink", ConceptKind.component), _link("gpu", ConceptKind.component), _link("hbm", ConceptKind.component)]
    merged = merge_inferred(existing, found, curated={"gpu"})
    assert [(link.concept, link.status) for link in merged] == [
        ("hbm", InferredStatus.proposed),  # new proposal; the old cuda proposal is replaced by what was found now
        ("nvlink", InferredStatus.rejected),  # a rejection survives re-tagging
    ]


def test_write_then_review_changes_only_the_inferred_block_and_the_curated_list(incident_file: Path) -> None:
    before = yaml.safe_load(incident_file.read_text(encoding="utf-8"))
    assert "nvlink" not in before["components"]
    written = write_inferred(incident_file, [_link("nvlink", ConceptKind.component), _link("cuda", ConceptKind.component),
                                             _link("gpu", ConceptKind.component)])
    assert {link.concept for link in written.inferred} == {"nvlink", "cuda"}  # gpu is curated already

    incident, accepted, rejected = review_links(incident_file, accept={"nvlink"}, reject={"cuda"})
    assert (accepted, rejected) == (["nvlink"], ["cuda"])
    after = yaml.safe_load(incident_file.read_text(encoding="utf-8"))
    assert after["components"] == [*before["components"], "nvlink"]
    assert after["inferred"] == [{"concept": "cuda", "kind": "component", "evidence": "words about cuda",
                                  "method": "alias", "confidence": 0.8, "status": "rejected"}]
    assert {k: v for k, v in after.items() if k not in ("components", "inferred")} == \
        {k: v for k, v in before.items() if k not in ("components", "inferred")}
    assert incident.id == before["id"]


def test_review_of_an_unproposed_or_contradictory_link_is_refused_and_the_file_kept(incident_file: Path) -> None:
    write_inferred(incident_file, [_link("nvlink", ConceptKind.component)])
    text = incident_file.read_text(encoding="utf-8")
    with pytest.raises(ReviewError, match="no proposed inferred link for hbm"):
        review_links(incident_file, accept={"hbm"}, reject=set())
    with pytest.raises(ReviewError, match="cannot both accept and reject nvlink"):
        review_links(incident_file, accept={"nvlink"}, reject={"nvlink"})
    assert incident_file.read_text(encoding="utf-8") == text
    review_links(incident_file, accept=set(), reject={"nvlink"})
    rejected = incident_file.read_text(encoding="utf-8")
    with pytest.raises(ReviewError, match=r"no proposed inferred link for nvlink \(rejected earlier: .*add it to the record"):
        review_links(incident_file, accept={"nvlink"}, reject=set())
    assert incident_file.read_text(encoding="utf-8") == rejected


def test_the_review_command_lists_each_link_by_its_label_in_the_asked_language_and_its_id(
        tmp_path: Path, data_dir: Path) -> None:
    from conftest import small_library
    from typer.testing import CliRunner

    from incidentlib.cli import app

    library = small_library(tmp_path / "lib", data_dir, ["IL-0001"])
    write_inferred(library / "incidents" / "IL-0001.yaml", [_link("natural-event", ConceptKind.cause)])
    runner = CliRunner()
    korean = runner.invoke(app, ["review", "IL-0001", "--data", str(library), "--lang", "ko"])
    assert korean.exit_code == 0, korean.output
    assert "cause 기상·자연 현상 (natural-event) 0.80 (alias)" in " ".join(korean.output.split())
    english = runner.invoke(app, ["review", "IL-0001", "--data", str(library), "--lang", "en"])
    assert "cause weather or natural event (natural-event) 0.80" in " ".join(english.output.split())
