"""The write store through the Library facade: drafts, ETags, review, links, deletes, history, tokens, refresh."""

from __future__ import annotations

import difflib
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import small_library
from fakes import HashEmbedder
from rdflib import Graph
from rdflib.namespace import PROV

from incidentlib import Library
from incidentlib.errors import (
    AuthError,
    Forbidden,
    IncidentNotFound,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    ReviewError,
    StateConflict,
    ValidationFailed,
)
from incidentlib.loader import load_library
from incidentlib.search.engine import SearchConfig
from incidentlib.store import STORE_FILE

IDS = ["IL-0001", "IL-0002", "IL-0025", "IL-0070"]  # IL-0025: named by data/diagnosis/shapes.yaml


def draft(word: str = "pangolin") -> dict[str, object]:
    return {
        "org": "meta",
        "title": {"en": f"Checkpoint stalls ({word})"},
        "summary": {"en": "Training jobs stalled while writing checkpoints."},
        "body": {"en": f"The {word} storage tier stopped answering."},
        "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}],
    }


def publishable() -> dict[str, object]:
    return {"title": {"ko": "체크포인트 지연"}, "summary": {"ko": "체크포인트 저장 중 학습 작업이 멈췄다."},
            "date": "2024-05", "components": ["gpu"]}


@pytest.fixture()
def root(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "lib", data_dir, IDS)


def open_lib(root: Path) -> Library:
    return Library(load_library(root), embedder=HashEmbedder())


@pytest.mark.slow
def test_a_draft_is_stored_searchable_and_seen_by_another_instance(root: Path) -> None:
    lib, other = open_lib(root), open_lib(root)
    record = lib.create_draft(draft("quokka"), actor="ci-bot")
    assert record.status == "draft" and record.id == "IL-0071"  # next after the highest IL id
    assert (root / STORE_FILE).is_file() and not (root / "incidents" / f"{record.id}.yaml").exists()
    assert [r.id for r in lib.search("quokka", mode="lexical").results] == [record.id]
    assert record.id not in other.data.incidents
    assert other.refresh() and record.id in other.data.incidents
    assert [r.id for r in other.search("quokka", mode="lexical").results] == [record.id]
    assert not other.refresh()  # nothing new: a no-op
    assert [d.id for d in other.drafts()] == [record.id]


@pytest.mark.slow
def test_the_follower_applies_another_instances_write_and_builds_search_before_any_request(root: Path) -> None:
    writer, follower = open_lib(root), open_lib(root)
    assert follower.search("quokka", mode="lexical").results == []  # its search structures exist before the write
    assert follower.organizations().items  # its facet columns too
    stop = threading.Event()
    thread = threading.Thread(target=follower.follow_changes, args=(stop, 0.05), daemon=True)
    thread.start()
    try:
        record = writer.create_draft(draft("quokka"), actor="ci-bot")

        def built_with_the_draft() -> bool:
            engine = follower.__dict__.get("_search_engine")
            return (engine is not None and "lexical" in engine.__dict__ and "_search_service" in follower.__dict__
                    and any(chunk.incident_id == record.id for chunk in engine.chunks))

        deadline = time.monotonic() + 120  # a bound on a loaded machine, not a latency claim (bench/bench_writes.py)
        while not built_with_the_draft():
            assert time.monotonic() < deadline, "the follower never applied the write"
            time.sleep(0.05)
        # no request ever called refresh(): the follower did, and built the index the search now uses
        assert follower.change_seq == writer.change_seq
        while not (follower._facets_of is not None and follower._facets_of[0] == follower.data.content_hash):
            assert time.monotonic() < deadline, "the follower never read the facet columns again"
            time.sleep(0.05)
        assert record.id in follower._facets_of[1].ids and follower._facets_of[1]._holders  # read and indexed
        assert [r.id for r in follower.search("quokka", mode="lexical").results] == [record.id]
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.slow  # over a second: the fast subset must stay under a minute
def test_the_follower_compacts_the_carried_index_once_writes_stop(root: Path, tmp_path: Path) -> None:
    writer = open_lib(root)
    follower = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "own-cache"), embedder=HashEmbedder())
    follower.prepare_search()
    stop = threading.Event()
    thread = threading.Thread(target=follower.follow_changes, args=(stop, 0.05, 0.5), daemon=True)
    thread.start()
    try:
        record = writer.create_draft(draft("quokka"), actor="ci-bot")
        deadline = time.monotonic() + 120  # a bound on a loaded machine, not a latency claim
        while follower.change_seq != writer.change_seq or follower.needs_compaction or (
                follower._search_engine.last_build is None):
            assert time.monotonic() < deadline, "the follower never compacted"
            time.sleep(0.05)
        build = follower._search_engine.last_build
        assert build.action == "compacted" and build.embedded == 0  # carried first, then written from memory
        fresh = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "fresh"), embedder=HashEmbedder())
        ranked = [r.id for r in follower.search("quokka storage", mode="dense").results]
        assert record.id in ranked and ranked == [r.id for r in fresh.search("quokka storage", mode="dense").results]
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_updates_need_the_current_etag(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    with pytest.raises(PreconditionRequired):
        lib.update_incident(record.id, {"severity": "sev2"}, None)
    updated = lib.update_incident(record.id, {"severity": "sev2"}, record.etag, actor="alice")
    assert updated.record["severity"] == "sev2" and updated.etag != record.etag
    with pytest.raises(PreconditionFailed, match="changed since you read it"):
        lib.update_incident(record.id, {"severity": "sev3"}, record.etag)  # the etag alice replaced
    assert lib.get(record.id).severity is not None and lib.get(record.id).severity.value == "sev2"
    removed = lib.update_incident(record.id, {"severity": None}, updated.etag)
    assert "severity" not in removed.record


def test_invalid_writes_name_the_field_and_store_nothing(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    with pytest.raises(ValidationFailed) as caught:
        lib.update_incident(record.id, {"severity": "sev9", "components": ["no-such-part"]}, record.etag)
    fields = {p.field for p in caught.value.problems}
    assert "severity" in fields
    with pytest.raises(ValidationFailed) as caught:
        lib.update_incident(record.id, {"components": ["no-such-part"]}, record.etag)
    assert [p.field for p in caught.value.problems] == ["components[0]"]
    with pytest.raises(ValidationFailed) as caught:
        lib.update_incident(record.id, {"id": "IL-0999"}, record.etag)
    assert caught.value.problems[0].field == "id"
    with pytest.raises(ValidationFailed) as caught:
        lib.create_draft({k: v for k, v in draft().items() if k != "sources"})
    assert caught.value.problems[0].field == "sources"
    assert lib.record(record.id).etag == record.etag
    assert [c.action for c in lib.history(record.id).items] == ["create"]


def test_a_text_of_spaces_is_refused_naming_the_field(root: Path) -> None:
    """A draft whose texts are only spaces has nothing to search or compare: it was stored, and broke `similar` for
    every query (no passage to score)."""
    lib = open_lib(root)
    blank = {**draft(), "title": {"ko": "   "}, "summary": {"ko": " "}, "body": {"ko": "\t"}}
    with pytest.raises(ValidationFailed) as caught:
        lib.create_draft(blank)
    assert {p.field for p in caught.value.problems} == {"title.ko", "summary.ko", "body.ko"}
    assert all("blank text" in p.message for p in caught.value.problems)
    record = lib.create_draft(draft())
    with pytest.raises(ValidationFailed) as caught:
        lib.update_incident(record.id, {"mitigation": {"en": "  "}}, record.etag)
    assert [p.field for p in caught.value.problems] == ["mitigation.en"]
    # one stored before the rule (written into the store directly): `similar` leaves it out and answers the rest
    from incidentlib.store import OverlayStore

    store = OverlayStore.for_library(root)
    with store.write() as tx:
        stored = tx.record(record.id)
        assert stored is not None
        tx.put(record.id, "update", "legacy", stored.doc, {
            **stored.doc, "title": {"en": "   "}, "summary": {"en": " "}, "body": {"en": " "}})
    legacy = open_lib(root)
    found = legacy.similar(text="a job hung on a collective", k=10).results
    assert found and record.id not in {result.id for result in found}
    assert record.id not in {result.id for result in legacy.similar(incident_id="IL-0025", k=10).results}


def test_an_etag_may_be_given_bare_as_people_copy_it(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    bare = record.etag.strip('"')
    updated = lib.update_incident(record.id, {"severity": "sev2"}, bare)  # without the quotes HTTP puts around it
    assert updated.record["severity"] == "sev2"
    with pytest.raises(PreconditionFailed):
        lib.update_incident(record.id, {"severity": "sev3"}, bare)  # still refused once stale
    listed = lib.update_incident(record.id, {"severity": "sev3"}, f'"0000000000000000", {updated.etag}')
    assert listed.record["severity"] == "sev3"


def test_tag_and_review_go_through_the_write_store_where_its_records_are(root: Path) -> None:
    """In a library with a write store, `tag` and `review` change the records as stored (a file edited beside the
    store was read by nobody, and the next write from a server put the store's copy back), in the history, and a
    second instance (a server) sees them; a draft that lives only in the store is tagged too."""
    lib, server = open_lib(root), open_lib(root)
    filed = lib.create_draft({**draft(), "body": {"en": "NCCL timed out on every rank after a GPU fell off the bus."}})
    files_before = sorted(p.name for p in (root / "incidents").iterdir())
    tagged = lib.tag([filed.id])
    proposed = [view.concept.id for view in tagged[0].inferred]
    assert "nccl" in proposed
    assert sorted(p.name for p in (root / "incidents").iterdir()) == files_before  # no file written or made
    assert [c.action for c in lib.history(filed.id).items] == ["create", "tag"]
    server.refresh()
    assert "nccl" in {link.concept for link in server.get(filed.id).proposed()}
    other = next(concept for concept in proposed if concept != "nccl")
    with pytest.raises(ReviewError):  # one unknown concept: nothing of the review is stored
        lib.review(filed.id, accept=["nccl"], reject=["no-such-concept"])
    assert "nccl" not in lib.get(filed.id).components
    result = lib.review(filed.id, accept=["nccl"], reject=[other])
    assert result.accepted == ["nccl"] and result.rejected == [other]
    server.refresh()
    stored = server.get(filed.id)
    assert "nccl" in stored.components and other not in {link.concept for link in stored.proposed()}
    assert [c.action for c in lib.history(filed.id).items] == ["create", "tag", "review-concepts"]
    again = lib.tag([filed.id])  # a rejected concept is not proposed again, an accepted one is curated now
    assert other not in {view.concept.id for view in again[0].inferred}
    assert "nccl" not in {view.concept.id for view in again[0].inferred}


def test_tag_leaves_a_record_of_the_files_in_its_file_and_says_which_records_it_refused(root: Path) -> None:
    import yaml

    from incidentlib.store import OverlayStore

    lib = open_lib(root)
    lib.create_draft(draft())  # the store exists from here on
    yaml_only = root / "incidents" / "IL-0002.yaml"
    doc = yaml.safe_load(yaml_only.read_text(encoding="utf-8"))
    yaml_only.write_text(yaml.safe_dump({**doc, "status": "draft"}, allow_unicode=True), encoding="utf-8")
    lib = open_lib(root)
    before = yaml_only.read_text(encoding="utf-8")
    result = lib.tag(["IL-0002"])
    assert result[0].problem is None and yaml_only.read_text(encoding="utf-8") != before  # written into its file
    assert OverlayStore.for_library(root).record("IL-0002") is None  # and not taken over by the store
    # a record the rules refuse, stored before they existed: said, and the others are tagged
    blank = lib.create_draft(draft("wombat"))
    store = OverlayStore.for_library(root)
    with store.write() as tx:
        stored = tx.record(blank.id)
        assert stored is not None
        tx.put(blank.id, "update", "legacy", stored.doc, {**stored.doc, "title": {"en": "   "}})
    good = lib.create_draft(draft("quokka"))
    lib = open_lib(root)
    results = {r.id: r for r in lib.tag([blank.id, good.id])}
    assert results[blank.id].problem and "title.en: blank text" in results[blank.id].problem
    assert results[good.id].problem is None and [c.action for c in lib.history(good.id).items] == ["create", "tag"]
    again = lib.tag([good.id])  # the same proposals again: nothing new in the history
    assert again[0].problem is None and [c.action for c in lib.history(good.id).items] == ["create", "tag"]
    with pytest.raises(ValidationFailed) as refused:  # and export-yaml will not write a file the library refuses
        lib.export_yaml()
    assert any(p.field == "title.en" for p in refused.value.problems)
    assert store.record(blank.id) is not None and not (root / "incidents" / f"{blank.id}.yaml").exists()


def test_a_new_record_is_a_draft_and_only_a_removed_record_is_restored(root: Path) -> None:
    lib = open_lib(root)
    with pytest.raises(ValidationFailed) as caught:
        lib.create_draft({**draft(), "status": "published"})
    assert [p.field for p in caught.value.problems] == ["status"] and "publish it" in caught.value.problems[0].message
    with pytest.raises(ValidationFailed) as caught:
        lib.create_draft({**draft(), "title": "Checkpoint stalls"})  # a string where a text object belongs
    assert [(p.field, p.message) for p in caught.value.problems] == [
        ("title", "expected an object with 'en' and/or 'ko' text, got str")]  # not our class's name
    record = lib.create_draft(draft())
    with pytest.raises(StateConflict, match="not deleted or rejected"):
        lib.restore(record.id)  # it is live: 409, not "no incident"
    with pytest.raises(StateConflict, match="not deleted or rejected"):
        lib.restore("IL-0001")  # a record of the files, never removed
    lib.reject(record.id)
    assert lib.restore(record.id).id == record.id


def test_publish_applies_the_published_rules(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    with pytest.raises(ValidationFailed) as caught:
        lib.publish(record.id)
    assert {"date", "title", "summary", "components"} <= {p.field for p in caught.value.problems}
    ready = lib.update_incident(record.id, publishable(), record.etag)
    published = lib.publish(record.id, actor="reviewer")
    assert published.status == "published" and not lib.get(record.id).is_draft and ready.etag != published.etag
    with pytest.raises(StateConflict):
        lib.publish(record.id)
    assert [(e.action, e.actor) for e in lib.history(record.id).items][-1] == ("publish", "reviewer")
    assert lib.history(record.id).items[-1].patch == [{"op": "replace", "path": "/status", "value": "published"}]


@pytest.mark.slow
def test_reject_delete_and_restore(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft("wombat"))
    lib.reject(record.id)
    assert record.id not in lib.data.incidents and lib.search("wombat", mode="lexical").results == []
    with pytest.raises(IncidentNotFound):
        lib.get(record.id)
    lib.restore(record.id)
    assert lib.get(record.id).is_draft
    lib.delete("IL-0001")
    assert "IL-0001" not in open_lib(root).data.incidents  # a base YAML record, hidden by the store
    assert (root / "incidents" / "IL-0001.yaml").is_file()  # soft: nothing removed
    lib.restore("IL-0001")
    assert "IL-0001" in open_lib(root).data.incidents
    with pytest.raises(StateConflict):
        lib.reject("IL-0001")  # published records are deleted, not rejected


def test_curated_links_and_their_referential_rules(root: Path) -> None:
    lib = open_lib(root)
    linked = lib.add_link("IL-0001", "IL-0002", {"en": "same storage tier"}, actor="curator")
    assert {"id": "IL-0002", "reason": {"en": "same storage tier"}} in linked.record["related"]
    with pytest.raises(StateConflict, match="link to IL-0002"):
        lib.delete("IL-0002")  # would leave a dangling link
    with pytest.raises(ValidationFailed) as caught:
        lib.add_link("IL-0001", "IL-0404", {"en": "x"})
    assert caught.value.problems[0].field.startswith("related[")
    lib.remove_link("IL-0001", "IL-0002")
    assert all(link.id != "IL-0002" for link in lib.get("IL-0001").related)
    with pytest.raises(StateConflict):
        lib.remove_link("IL-0001", "IL-0002")


def test_inferred_concepts_are_accepted_into_their_field_or_rejected(root: Path) -> None:
    lib = open_lib(root)
    doc = {**draft(), "inferred": [{"concept": "hbm", "kind": "component", "evidence": "memory", "method": "alias", "confidence": 0.9},
                                   {"concept": "gpu", "kind": "component", "evidence": "x", "method": "alias", "confidence": 0.6}]}
    record = lib.create_draft(doc)
    accepted = lib.review_concept(record.id, "hbm", accept=True)
    assert accepted.record["components"] == ["hbm"]
    assert [link["concept"] for link in accepted.record["inferred"]] == ["gpu"]
    rejected = lib.review_concept(record.id, "gpu", accept=False)
    assert rejected.record["components"] == ["hbm"]
    assert rejected.record["inferred"] == [{**doc["inferred"][1], "status": "rejected"}]
    assert [link.concept for link in lib.get(record.id).proposed()] == []
    with pytest.raises(StateConflict):  # a rejected link is no longer proposed
        lib.review_concept(record.id, "gpu", accept=True)
    with pytest.raises(StateConflict):
        lib.review_concept(record.id, "hbm", accept=False)


def test_a_concept_is_reviewed_on_the_version_read_and_must_exist(root: Path) -> None:
    lib = open_lib(root)
    doc = {**draft(), "inferred": [{"concept": "hbm", "kind": "component", "evidence": "memory", "method": "alias", "confidence": 0.9},
                                   {"concept": "gpu", "kind": "component", "evidence": "x", "method": "alias", "confidence": 0.6}]}
    record = lib.create_draft(doc)
    edited = lib.update_incident(record.id, {"severity": "sev2"}, record.etag)
    with pytest.raises(PreconditionFailed, match="changed since you read it"):  # reviewed on the version before the edit
        lib.review_concept(record.id, "hbm", accept=True, if_match=record.etag)
    assert [link.concept for link in lib.get(record.id).proposed()] == ["hbm", "gpu"]  # nothing changed
    accepted = lib.review_concept(record.id, "hbm", accept=True, if_match=edited.etag)
    assert accepted.record["components"] == ["hbm"]
    with pytest.raises(NotFound, match=r"concept: unknown concept 'hbmm' \(did you mean hbm\?\)"):
        lib.review_concept(record.id, "hbmm", accept=True)


def test_history_is_prov_o(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft(), actor="ci-bot")
    lib.update_incident(record.id, {"severity": "sev2"}, record.etag, actor="alice")
    graph = Graph().parse(data=lib.history_rdf("ttl", record.id), format="turtle")
    rows = list(graph.query(
        "SELECT ?agent ?when WHERE { ?a a prov:Activity ; prov:wasAssociatedWith ?agent . "
        "?v prov:wasGeneratedBy ?a ; prov:generatedAtTime ?when . } ORDER BY ?when", initNs={"prov": PROV}))
    assert {str(r[0]).rsplit("/", 1)[-1] for r in rows} == {"ci-bot", "alice"}
    assert len(list(graph.subject_objects(PROV.wasRevisionOf))) == 1


def test_tokens_are_hashed_role_checked_revocable_and_expire(root: Path) -> None:
    lib = open_lib(root)
    editor = lib.create_token("ci-bot", "editor")
    reader = lib.create_token("dash", "reader")
    secret = editor.token.split("_", 2)[2]
    with sqlite3.connect(root / STORE_FILE) as conn:
        stored = b"".join(bytes(r[0]) + str(r[1]).encode() for r in conn.execute("SELECT hash, name FROM tokens"))
    assert secret.encode() not in stored
    assert lib.authorize(editor.token, "editor") == "ci-bot"
    with pytest.raises(Forbidden):
        lib.authorize(reader.token, "editor")
    with pytest.raises(AuthError):
        lib.authorize(editor.token[:-2] + "xx", "reader")
    with pytest.raises(AuthError):
        lib.authorize(None, "reader")
    lib.revoke_token(editor.id)
    with pytest.raises(AuthError, match="revoked"):
        open_lib(root).authorize(editor.token, "reader")
    with pytest.raises(AuthError, match="revoked"):
        lib.authorize(editor.token, "reader")  # the verified-token memo does not outlive a revoke
    short = lib.create_token("temp", "admin", expires_days=1)
    with sqlite3.connect(root / STORE_FILE) as conn:
        conn.execute("UPDATE tokens SET expires = '2000-01-01T00:00:00+00:00' WHERE id = ?", (short.id,))
    with pytest.raises(AuthError, match="expired"):
        lib.authorize(short.token, "reader")
    assert {t.name: t.active for t in lib.tokens()} == {"ci-bot": False, "dash": True, "temp": False}


def test_export_yaml_writes_the_store_back_and_the_library_validates(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    lib.delete("IL-0002")
    report = lib.export_yaml()
    assert report.written == [record.id] and report.removed == ["IL-0002"]
    doc = yaml.safe_load((root / "incidents" / f"{record.id}.yaml").read_text(encoding="utf-8"))
    assert doc["status"] == "draft" and doc["id"] == record.id
    assert not (root / "incidents" / "IL-0002.yaml").exists()
    _, loaded, problems = Library.check(root)
    assert problems == [] and loaded is not None and record.id in loaded.incidents
    assert [c.action for c in lib.history(record.id).items] == ["create"]  # history outlives the export
    assert record.id in open_lib(root).data.incidents


def test_export_yaml_changes_only_the_lines_of_the_fields_that_changed(root: Path) -> None:
    """A one-field edit of a curated file comes back as a one-line diff (it used to rewrite the whole file: keys
    sorted, narratives folded into quoted text, status written out)."""
    lib = open_lib(root)
    path = root / "incidents" / "IL-0001.yaml"
    before = path.read_text(encoding="utf-8")
    current = lib.record("IL-0001")
    lib.update_incident("IL-0001", {"severity": "sev1"}, current.etag)
    lib.export_yaml()
    after = path.read_text(encoding="utf-8")
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["+severity: sev1"]
    assert "status:" not in after  # the default the file left out stays out
    loaded = open_lib(root).get("IL-0001")
    assert loaded.severity is not None and loaded.severity.value == "sev1"


def test_validate_checks_the_store_too(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    (root / "vocab" / "organizations.yaml").write_text(
        (root / "vocab" / "organizations.yaml").read_text(encoding="utf-8").replace("id: meta\n", "id: meta-gone\n"),
        encoding="utf-8")
    _, _, problems = Library.check(root)
    assert any(p.file.endswith(record.id) and p.field == "org" for p in problems)


def test_a_request_during_a_refresh_waits_for_the_whole_change(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request arriving while a refresh applies a write must not see the new records with the old graph."""
    writer, reader = open_lib(root), open_lib(root)
    assert reader.detail("IL-0001").id == "IL-0001"  # the graph of the records before the write is built
    record = writer.create_draft(draft("quokka"), actor="ci-bot")
    seen: dict[str, object] = {}
    sync_graph = Library._sync_graph_store

    def request() -> None:
        try:
            reader.refresh()  # what every API request does first
            seen["detail"] = reader.detail(record.id)
        except (LookupError, ValueError) as exc:  # what a record missing from the old graph raises
            seen["error"] = exc

    def in_the_middle(self: Library, previous: object = None, changed: object = None) -> str:
        if self is reader and "thread" not in seen:
            thread = threading.Thread(target=request)
            seen["thread"] = thread
            thread.start()
            thread.join(timeout=0.5)
            seen["done_during_refresh"] = not thread.is_alive()
        return sync_graph(self, previous, changed)  # type: ignore[arg-type]

    monkeypatch.setattr(Library, "_sync_graph_store", in_the_middle)
    assert reader.refresh()
    thread = seen["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(timeout=30)
    assert "error" not in seen, seen.get("error")
    assert seen["done_during_refresh"] is False  # it waited for the refresh
    detail = seen["detail"]
    assert getattr(detail, "id", None) == record.id


def test_an_engine_built_from_records_a_refresh_replaced_is_dropped(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that started building the search engine before a refresh stores it after the refresh: the next
    request must not search the old records with it."""
    import incidentlib.library as library_module

    writer, reader = open_lib(root), open_lib(root)
    started, release = threading.Event(), threading.Event()

    engine_class = library_module.SearchEngine

    class Held(engine_class):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            started.set()
            release.wait(timeout=30)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(library_module, "SearchEngine", Held)
    builder = threading.Thread(target=lambda: reader._search_engine)
    builder.start()
    assert started.wait(timeout=30)
    record = writer.create_draft(draft("quokka"), actor="ci-bot")
    assert reader.refresh() and record.id in reader.data.incidents
    release.set()
    builder.join(timeout=60)
    assert reader.__dict__["_search_engine"].data is not reader.data  # the stale engine was stored
    monkeypatch.setattr(library_module, "SearchEngine", engine_class)
    assert not reader.refresh()  # no new change, but the stale engine is found and dropped
    assert "_search_engine" not in reader.__dict__
    assert [r.id for r in reader.search("quokka", mode="lexical").results] == [record.id]


def _held_open_store(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make the library's next graph store wait between reading the records and being stored (a load of seconds)."""
    import incidentlib.library as library_module

    started, release = threading.Event(), threading.Event()
    open_store = library_module.open_store

    def held(config: object, data: object) -> object:
        started.set()
        release.wait(timeout=30)
        return open_store(config, data)  # type: ignore[arg-type]

    monkeypatch.setattr(library_module, "open_store", held)
    return started, release


def test_a_graph_store_loaded_from_records_a_refresh_replaced_is_brought_along(root: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = open_lib(root), open_lib(root)
    started, release = _held_open_store(monkeypatch)
    loader = threading.Thread(target=lambda: reader.export("nt"))  # the first SPARQL or export loads the store
    loader.start()
    assert started.wait(timeout=30)
    record = writer.create_draft(draft("quokka"), actor="ci-bot")
    assert reader.refresh()  # no store open yet: nothing to patch
    release.set()
    loader.join(timeout=60)
    ask = f'ASK {{ ?i <http://purl.org/dc/terms/identifier> "{record.id}" }}'
    assert reader.sparql(ask).boolean is False  # the store of the records before the write was stored
    assert not reader.refresh()  # no new change; the store is found to hold other records
    assert reader.sparql(ask).boolean is True
    assert record.id in reader.export("nt")


def test_a_graph_store_that_cannot_follow_a_change_fails_no_request(root: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    import incidentlib.library as library_module

    writer, reader = open_lib(root), open_lib(root)
    ask = 'ASK {{ ?i <http://purl.org/dc/terms/identifier> "{}" }}'
    assert reader.sparql(ask.format("IL-0001")).boolean is True  # the graph store is open
    sync = Library._sync_graph_store
    failures = []

    def failing(self: Library, previous: object = None, changed: object = None) -> str:
        failures.append(1)
        raise ConnectionError("the SPARQL endpoint does not answer")

    record = writer.create_draft(draft("quokka"), actor="ci-bot")
    monkeypatch.setattr(Library, "_sync_graph_store", failing)
    monkeypatch.setattr(library_module, "GRAPH_RETRY_S", 3600.0)
    assert reader.refresh()  # applied, not raised
    assert reader.change_seq == writer.change_seq and "could not follow the change" in caplog.text
    assert [r.id for r in reader.search("quokka", mode="lexical").results] == [record.id]
    assert reader.detail(record.id).id == record.id
    assert not reader.refresh() and not reader.refresh()
    assert len(failures) == 1  # not tried again before GRAPH_RETRY_S
    monkeypatch.setattr(Library, "_sync_graph_store", sync)
    reader._graph_retry_at = 0.0  # the retry is due
    assert not reader.refresh()  # the store is brought along at this look
    assert reader.sparql(ask.format(record.id)).boolean is True


def test_a_list_read_while_a_refresh_removes_an_incident_leaves_it_out(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = open_lib(root), open_lib(root)
    filter_ids = Library.filter_ids

    def then_a_delete(self: Library, filters: object) -> list[str]:
        ids = filter_ids(self, filters)  # type: ignore[arg-type]
        if self is reader:
            writer.delete("IL-0002")
            assert reader.refresh()  # what the follower thread may do at this moment
        return ids

    monkeypatch.setattr(Library, "filter_ids", then_a_delete)
    page = reader.list_incidents()
    assert page.total == 4 and [item.id for item in page.items] == ["IL-0001", "IL-0025", "IL-0070"]
    monkeypatch.setattr(Library, "filter_ids", filter_ids)
    assert [item.id for item in reader.list_incidents().items] == ["IL-0001", "IL-0025", "IL-0070"]


def test_a_short_ticket_key_reads_and_writes_the_stored_record(root: Path) -> None:
    """``IL-71`` is ``IL-0071`` for the change log and every write, as for reading (history answered "no changes",
    and a write said there was no such incident)."""
    lib = open_lib(root)
    record = lib.create_draft(draft("wombat"))
    short = f"IL-{int(record.id.split('-')[1])}"
    assert short != record.id and lib.get(short).id == record.id
    assert [c.action for c in lib.history(short).items] == ["create"] and lib.history(short).id == record.id
    rejected = lib.reject(short, if_match=record.etag)
    assert rejected.id == record.id
    assert [c.action for c in lib.history(short).items] == ["create", "reject"]  # out of view, still in the log
    assert lib.restore(short).id == record.id


def test_writes_that_change_nothing_leave_no_trace_and_removed_ids_are_explained(root: Path) -> None:
    lib = open_lib(root)
    record = lib.create_draft(draft())
    same = lib.update_incident(record.id, {}, record.etag)  # an empty patch
    assert same.etag == record.etag and [c.action for c in lib.history(record.id).items] == ["create"]
    lib.add_link(record.id, "IL-0001", {"en": "same tier", "ko": "같은 계층"})
    lib.add_link(record.id, "IL-0002", {"en": "same cause"})
    relinked = lib.add_link(record.id, "IL-0001", {"en": "same storage tier"})  # a new English reason keeps the Korean
    assert relinked.record["related"] == [{"id": "IL-0001", "reason": {"en": "same storage tier", "ko": "같은 계층"}},
                                          {"id": "IL-0002", "reason": {"en": "same cause"}}]
    lib.add_link(record.id, "IL-0002", {"en": "same cause"})  # the same link again: no change
    assert [c.action for c in lib.history(record.id).items] == ["create", "link", "link", "link"]
    lib.reject(record.id)
    with pytest.raises(StateConflict, match=rf"id: '{record.id}' belongs to a rejected draft; `incidentlib restore"):
        lib.create_draft({**draft(), "id": record.id})
    lib.export_yaml()
    with pytest.raises(StateConflict, match=rf"{record.id} was rejected by local .* `incidentlib export-yaml` has since"):
        lib.restore(record.id)
