"""The review queue's pages through the ASGI app: token sign-in, the diff, concept review, publish, reject, CSRF."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from conftest import small_library
from fakes import HashEmbedder
from fastapi.testclient import TestClient

from incidentlib import Library
from incidentlib.api import ServiceSettings, create_app
from incidentlib.loader import load_library
from incidentlib.web._review import SESSION_COOKIE, field_changes

BASE_URL = "http://127.0.0.1:8000"  # the Host allow-list accepts loopback names only
IDS = ["IL-0001", "IL-0002", "IL-0025"]
# A draft as an import files it: English only, no date, no curated component; two concepts proposed by the tagger.
DRAFT = {"org": "meta", "title": {"en": "Checkpoint stalls on the <b>pangolin</b> tier"},
         "summary": {"en": "Training jobs stalled while writing checkpoints."},
         "body": {"en": "The pangolin storage tier stopped answering."},
         "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}],
         "inferred": [{"concept": "hbm", "kind": "component", "evidence": "memory errors", "method": "alias", "confidence": 0.9},
                      {"concept": "gpu", "kind": "component", "evidence": "GPU", "method": "alias", "confidence": 0.6}]}
# The edit a curator makes before review: the Korean text and the date the published rules need.
EDIT = {"title": {"ko": "체크포인트 지연"}, "summary": {"ko": "체크포인트 저장 중 학습 작업이 멈췄다."}, "date": "2024-05"}


@pytest.fixture()
def lib(tmp_path: Path, data_dir: Path) -> Library:
    return Library(load_library(small_library(tmp_path / "lib", data_dir, IDS)), embedder=HashEmbedder())


@pytest.fixture()
def client(lib: Library) -> TestClient:
    return TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL, follow_redirects=False)


def filed(lib: Library, edit: bool = True) -> str:
    record = lib.create_draft(DRAFT, actor="importer")
    if edit:
        lib.update_incident(record.id, EDIT, record.etag, actor="alice")
    return record.id


def form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "no form token on the signed-in page"
    return found.group(1)


def signed_in(client: TestClient, token: str) -> str:
    """Sign in through the form; the page's form token."""
    response = client.post("/ui/review/sign-in", data={"token": token, "lang": "en"})
    assert response.status_code == 303 and response.headers["location"] == "/ui/review?lang=en&done=signed_in"
    page = client.get(response.headers["location"])
    assert page.status_code == 200 and "Signed in." in page.text
    return form_token(page.text)


def test_sign_in_keeps_the_token_in_a_strict_httponly_cookie_and_sign_out_clears_it(client: TestClient, lib: Library) -> None:
    token = lib.create_token("reviewer-ann", "editor").token
    open_page = client.get("/ui/review", params={"lang": "en"})
    assert open_page.status_code == 200 and 'type="password"' in open_page.text and 'name="csrf"' not in open_page.text
    response = client.post("/ui/review/sign-in", data={"token": token, "lang": "en"})
    assert response.status_code == 303
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/ui" in cookie and "Secure" not in cookie  # http here; https pages get Secure
    page = client.get("/ui/review", params={"lang": "en"})
    assert "reviewer-ann" in page.text and token not in page.text  # the token is never echoed into a page
    assert page.headers["cache-control"] == "no-store"
    assert client.get("/ui/review?lang=ko").text.count("로그아웃") == 1
    out = client.post("/ui/review/sign-out", data={"csrf": form_token(page.text), "lang": "en"})
    assert out.status_code == 303 and f'{SESSION_COOKIE}=""' in out.headers["set-cookie"]
    after = client.get(out.headers["location"])
    assert "Signed out." in after.text and 'type="password"' in after.text and "reviewer-ann" not in after.text


def test_bad_revoked_and_reader_tokens_get_a_message_not_a_session(client: TestClient, lib: Library) -> None:
    unknown = client.post("/ui/review/sign-in", data={"token": "il_0000beef_nope", "lang": "en"})
    assert unknown.status_code == 401 and "This token is not valid" in unknown.text and "set-cookie" not in unknown.headers
    assert "il_0000beef_nope" not in unknown.text and "Traceback" not in unknown.text
    reader = client.post("/ui/review/sign-in", data={"token": lib.create_token("dash", "reader").token, "lang": "ko"})
    assert reader.status_code == 403 and "읽기만 할 수 있습니다" in reader.text and "set-cookie" not in reader.headers
    assert client.post("/ui/review/sign-in", data={"token": "", "lang": "en"}).status_code == 401
    revoked = lib.create_token("gone", "editor")
    signed_in(client, revoked.token)
    lib.revoke_token(revoked.id)
    page = client.get("/ui/review", params={"lang": "en"})  # a session whose token was revoked since ends at once
    assert "sign in again" in page.text and "was revoked" in page.text and 'type="password"' in page.text


def test_the_queue_shows_the_diff_and_the_proposed_concepts_escaped(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib)
    signed_in(client, lib.create_token("ann", "editor").token)
    page = client.get("/ui/review", params={"lang": "en"}).text
    assert f'id="draft-{draft_id}"' in page
    assert "&lt;b&gt;pangolin&lt;/b&gt;" in page and "<b>pangolin</b>" not in page  # record text is escaped
    assert re.search(r"Filed by <strong>importer</strong>", page)
    assert re.search(r"<strong>alice</strong> · update", page)
    assert re.search(r"<code>title\.ko</code></th><td></td><td><ins><bdi>체크포인트 지연</bdi></ins>", page)
    assert re.search(r"<code>date</code></th><td></td><td><ins><bdi>2024-05</bdi></ins>", page)
    assert 'aria-label="Accept: HBM' in page or 'aria-label="Accept: hbm' in page.lower()
    assert "confidence 0.90" in page.lower() and "memory errors" in page
    forms = re.findall(rf'<form method="post" action="/ui/review/{draft_id}/[^"]+">(.*?)</form>', page, re.S)
    assert len(forms) >= 4  # publish, reject, and accept / reject of each proposed concept
    assert all('name="etag"' in form for form in forms)  # every decision is made on the version shown


def test_field_changes_are_field_by_field_with_removals() -> None:
    before = {"title": {"en": "a"}, "severity": "sev2", "components": ["gpu"]}
    after = {"title": {"en": "a", "ko": "가"}, "components": ["gpu", "hbm"]}
    assert field_changes(before, after) == [("title.ko", "", "가"), ("components", '["gpu"]', '["gpu", "hbm"]'),
                                            ("severity", "sev2", "")]


def test_accept_a_concept_then_publish_records_the_reviewer(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    accepted = client.post(f"/ui/review/{draft_id}/concepts/hbm/accept", data={"csrf": csrf, "lang": "en"})
    assert accepted.status_code == 303
    assert accepted.headers["location"] == f"/ui/review?lang=en&done=accepted&id={draft_id}#draft-{draft_id}"
    assert lib.record(draft_id).record["components"] == ["hbm"]
    rejected = client.post(f"/ui/review/{draft_id}/concepts/gpu/reject", data={"csrf": csrf, "lang": "en"})
    assert rejected.status_code == 303 and lib.get(draft_id).proposed() == []
    page = client.get(accepted.headers["location"]).text
    assert "Concept accepted on" in page
    etag = re.search(r'name="etag" value="([^"]+)"', page)
    assert etag
    published = client.post(f"/ui/review/{draft_id}/publish", data={"csrf": csrf, "lang": "en", "etag": html.unescape(etag.group(1))})
    assert published.status_code == 303 and "done=published" in published.headers["location"]
    assert lib.record(draft_id).status == "published"
    history = lib.history(draft_id).items
    assert [(e.action, e.actor) for e in history] == [("create", "importer"), ("update", "alice"), ("accept-concept", "ann"),
                                                     ("reject-concept", "ann"), ("publish", "ann")]
    incident = client.get(f"/ui/incidents/{draft_id}", params={"lang": "en"}).text
    assert 'data-status="published"' in incident


def test_a_stale_page_and_an_unpublishable_draft_are_explained(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    old_etag = lib.record(draft_id).etag
    lib.review_concept(draft_id, "hbm", accept=True, actor="bob")  # someone else changes it after the page loaded
    stale = client.post(f"/ui/review/{draft_id}/publish", data={"csrf": csrf, "lang": "en", "etag": old_etag})
    assert stale.status_code == 412 and "changed since you loaded the page" in stale.text
    assert lib.record(draft_id).status == "draft"
    bare = filed(lib, edit=False)  # English only, no date, no component
    refused = client.post(f"/ui/review/{bare}/publish", data={"csrf": csrf, "lang": "en", "etag": lib.record(bare).etag})
    assert refused.status_code == 422 and "does not meet the rules" in refused.text
    assert "<code>date</code>" in refused.text and "<code>components</code>" in refused.text
    assert lib.record(bare).status == "draft"
    gone = client.post(f"/ui/review/{bare}/reject", data={"csrf": csrf, "lang": "en"})
    assert gone.status_code == 303 and "done=rejected" in gone.headers["location"]
    assert bare not in {d.id for d in lib.drafts()}
    again = client.post(f"/ui/review/{bare}/reject", data={"csrf": csrf, "lang": "en"})
    assert again.status_code in (404, 409) and "Nothing was changed" in again.text


def test_cross_site_and_tokenless_forms_are_refused(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    etag = lib.record(draft_id).etag
    no_form_token = client.post(f"/ui/review/{draft_id}/publish", data={"lang": "en", "etag": etag})
    assert no_form_token.status_code == 403 and "did not come from this page" in no_form_token.text
    wrong = client.post(f"/ui/review/{draft_id}/concepts/hbm/accept", data={"csrf": "0" * 64, "lang": "en"})
    assert wrong.status_code == 403
    foreign = client.post(f"/ui/review/{draft_id}/publish", data={"csrf": csrf, "lang": "en", "etag": etag},
                          headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403  # the service's Origin guard
    cross = client.post("/ui/review/sign-out", data={"csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    client.cookies.clear()
    anonymous = client.post(f"/ui/review/{draft_id}/reject", data={"csrf": csrf, "lang": "en"})
    assert anonymous.status_code == 401 and "Sign in with an editor token first" in anonymous.text
    assert lib.record(draft_id).status == "draft" and len(lib.history(draft_id).items) == 2  # nothing was written


def test_the_cookie_is_secure_when_the_page_is_https(lib: Library) -> None:
    secure = TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url="https://127.0.0.1:8443",
                        follow_redirects=False)
    response = secure.post("/ui/review/sign-in", data={"token": lib.create_token("ann", "admin").token, "lang": "en"})
    assert response.status_code == 303 and "Secure" in response.headers["set-cookie"]  # an admin may review too


def test_a_draft_of_the_files_shows_its_first_store_change_as_an_edit(client: TestClient, lib: Library, tmp_path: Path) -> None:
    import yaml

    path = lib.root / "incidents" / "IL-0002.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**doc, "status": "draft"}, allow_unicode=True), encoding="utf-8")
    fresh = Library(load_library(lib.root), embedder=HashEmbedder())
    app_client = TestClient(create_app(fresh, ServiceSettings(mount_mcp=False)), base_url=BASE_URL, follow_redirects=False)
    current = fresh.record("IL-0002")
    fresh.update_incident("IL-0002", {"severity": "sev2"}, current.etag, actor="alice")
    signed_in(app_client, fresh.create_token("reviewer-bo", "editor").token)
    page = html.unescape(app_client.get("/ui/review", params={"lang": "en"}).text)
    article = page[page.index('id="draft-IL-0002"'):]
    article = article[: article.index("</article>")]
    assert "Filed by" not in article  # filed in the files, not by alice
    assert "alice" in article and "severity" in article  # her change is listed as an edit


def test_a_stale_reject_keeps_the_draft_someone_edited(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib, edit=False)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    page = client.get("/ui/review", params={"lang": "en"}).text
    form = page[page.index(f'action="/ui/review/{draft_id}/reject"'):]
    shown = re.search(r'name="etag" value="([^"]+)"', form[: form.index("</form>")])
    assert shown, "the reject form carries the ETag the page showed"
    lib.update_incident(draft_id, EDIT, lib.record(draft_id).etag, actor="bob")  # bob edits after the page loaded
    stale = client.post(f"/ui/review/{draft_id}/reject", data={"csrf": csrf, "lang": "en", "etag": html.unescape(shown.group(1))})
    assert stale.status_code == 412 and "changed since you loaded the page; nothing was rejected" in stale.text
    assert lib.record(draft_id).status == "draft" and lib.record(draft_id).record["date"] == "2024-05"  # bob's edit kept
    ko = client.post(f"/ui/review/{draft_id}/reject", data={"csrf": csrf, "lang": "ko", "etag": html.unescape(shown.group(1))})
    assert ko.status_code == 412 and "거절하지 않았습니다" in ko.text
    current = lib.record(draft_id).etag
    done = client.post(f"/ui/review/{draft_id}/reject", data={"csrf": csrf, "lang": "en", "etag": current})
    assert done.status_code == 303 and draft_id not in {d.id for d in lib.drafts()}


def test_a_draft_another_reviewer_published_meanwhile_is_said_to_be_published(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    shown = lib.record(draft_id).etag  # ann's page
    lib.review_concept(draft_id, "hbm", accept=True, actor="bob")
    lib.review_concept(draft_id, "gpu", accept=False, actor="bob")
    lib.publish(draft_id, actor="bob")  # bob publishes first
    late = client.post(f"/ui/review/{draft_id}/publish", data={"csrf": csrf, "lang": "en", "etag": shown})
    assert late.status_code == 412 and "Another reviewer has just published this draft" in late.text
    assert "changed since you loaded the page" not in late.text
    assert [e.action for e in lib.history(draft_id).items].count("publish") == 1


def test_a_concept_decision_on_a_stale_page_changes_nothing(client: TestClient, lib: Library) -> None:
    draft_id = filed(lib, edit=False)
    csrf = signed_in(client, lib.create_token("ann", "editor").token)
    page = client.get("/ui/review", params={"lang": "en"}).text
    form = page[page.index(f'action="/ui/review/{draft_id}/concepts/hbm/accept"'):]
    shown = re.search(r'name="etag" value="([^"]+)"', form[: form.index("</form>")])
    assert shown, "the accept form carries the ETag the page showed"
    lib.update_incident(draft_id, EDIT, lib.record(draft_id).etag, actor="bob")  # bob edits after the page loaded
    stale = client.post(f"/ui/review/{draft_id}/concepts/hbm/accept",
                        data={"csrf": csrf, "lang": "en", "etag": html.unescape(shown.group(1))})
    assert stale.status_code == 412 and "no concept was accepted or rejected" in stale.text
    assert "hbm" not in lib.record(draft_id).record.get("components", [])
    done = client.post(f"/ui/review/{draft_id}/concepts/hbm/accept",
                       data={"csrf": csrf, "lang": "en", "etag": lib.record(draft_id).etag})
    assert done.status_code == 303 and lib.record(draft_id).record["components"] == ["hbm"]
