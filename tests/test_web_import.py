"""The import page through the ASGI app: an editor previews an export, imports it as drafts, and finds them in the
review queue; without a sign-in or the form's token nothing is read or stored."""

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
from incidentlib.requests import IMPORT_FLAGS, MAX_IMPORT_CHARS, name_options
from incidentlib.web._i18n import texts
from incidentlib.web._import import _form_names

BASE_URL = "http://127.0.0.1:8000"
# A ticket export as a team has it: organizations the library knows, a Jira date, a description over two lines,
# one record without its link.
EXPORT = ("Key,Summary,Description,Created,Company,Link\r\n"
          'OPS-87,NCCL all-reduce hung on one rack,"Watchdog caught collective operation timeout.\r\n'
          'The rack\'s leaf switch had flapped.",05/Mar/24 2:22 PM,meta,https://tickets.example/OPS-87\r\n'
          "OPS-88,Checkout errors after a config push,A bad config was rolled back.,06/Mar/24 9:00 AM,meta,\r\n")
FORM = {"format": "csv", "id_prefix": "OPS", "record_lang": "en", "maps": "id=Key\ntitle=Summary\nbody=Description\norg=Company",
        "sets": "", "date_format": "", "lang": "en"}


@pytest.fixture()
def lib(tmp_path: Path, data_dir: Path) -> Library:
    return Library(load_library(small_library(tmp_path / "lib", data_dir, ["IL-0001", "IL-0025"])), embedder=HashEmbedder())


@pytest.fixture()
def client(lib: Library) -> TestClient:
    return TestClient(create_app(lib, ServiceSettings(mount_mcp=False)), base_url=BASE_URL, follow_redirects=False)


def sign_in(client: TestClient, lib: Library) -> str:
    token = lib.create_token("importer-kim", "editor").token
    assert client.post("/ui/review/sign-in", data={"token": token, "lang": "en"}).status_code == 303
    page = client.get("/ui/import", params={"lang": "en"})
    assert page.status_code == 200 and "importer-kim" in page.text and page.headers["cache-control"] == "no-store"
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert found
    return found.group(1)


def test_preview_then_import_files_drafts_for_review(client: TestClient, lib: Library) -> None:
    csrf = sign_in(client, lib)
    before = {item.id for item in lib.list_incidents().items}
    preview = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview"},
                          files={"file": ("tickets.csv", EXPORT.encode("utf-8"), "text/csv")})
    assert preview.status_code == 200, preview.text
    assert "Preview: nothing was stored" in preview.text and "1 record(s) would be added, 1 rejected." in preview.text
    assert "tickets.csv:2" in preview.text and "OPS-0087" in preview.text  # located in the team's own file
    # the reason names the form's field, not the command line's flag (a web user sees no command line)
    rejected = preview.text[preview.text.index('class="import-rejected"'):]
    assert "map one with “Field mapping” source_url=…" in rejected and "--map" not in preview.text
    assert "tickets.csv:4" in preview.text and "no source URL" in preview.text
    assert "The rack&#39;s leaf switch had flapped." in preview.text  # the file's text is in the paste box now
    assert {item.id for item in lib.list_incidents().items} == before  # a preview stores nothing
    # what a browser sends back: the paste box as parsed (one newline after <textarea> is dropped) and the file's name
    content = re.search(r'<textarea id="import-content"[^>]*>\n?(.*?)</textarea>', preview.text, re.DOTALL)
    filename = re.search(r'name="filename" value="([^"]*)"', preview.text)
    assert content and filename and html.unescape(content.group(1)) == EXPORT
    done = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "import", "filename": filename.group(1),
                                           "content": html.unescape(content.group(1))})
    assert done.status_code == 200 and "1 draft(s) added, 1 record(s) rejected." in done.text
    assert "tickets.csv:2" in done.text and "tickets.csv:4" in done.text  # the same places as the preview
    assert 'href="/ui/review?lang=en"' in done.text
    record = lib.detail("OPS-0087")
    assert record.status == "draft" and record.date == "2024-03-05"
    assert "leaf switch had flapped" in (record.body or "")
    queue = client.get("/ui/review", params={"lang": "en"})
    assert "OPS-0087" in queue.text and "NCCL all-reduce hung on one rack" in queue.text


def test_no_sign_in_no_form_token_no_import(client: TestClient, lib: Library) -> None:
    page = client.get("/ui/import", params={"lang": "ko"})
    assert page.status_code == 200 and 'name="csrf"' not in page.text and "편집자 로그인" in page.text
    refused = client.post("/ui/import", data={**FORM, "action": "import", "content": EXPORT})
    assert refused.status_code == 401 and "Sign in with an editor token first." in refused.text
    sign_in(client, lib)
    forged = client.post("/ui/import", data={**FORM, "csrf": "0" * 64, "action": "import", "content": EXPORT})
    assert forged.status_code == 403 and "nothing was changed" in forged.text
    assert all(item.status != "draft" for item in lib.list_incidents().items)


def test_what_cannot_be_imported_is_said_on_the_page(client: TestClient, lib: Library) -> None:
    csrf = sign_in(client, lib)
    empty = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview", "content": "  "})
    assert empty.status_code == 422 and "Choose a file or paste the collection" in empty.text
    latin1 = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview"},
                         files={"file": ("old.csv", "title\ncafé\n".encode("latin-1"), "text/csv")})
    assert latin1.status_code == 422 and "old.csv:2: not UTF-8 text" in latin1.text
    bad_map = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview", "content": EXPORT,
                                              "maps": "oops"})
    assert bad_map.status_code == 422 and "“Field mapping” &#39;oops&#39;: write FIELD=SOURCE" in bad_map.text
    assert "--map" not in bad_map.text
    ambiguous = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview", "lang": "ko",
                                                "content": EXPORT.replace("05/Mar/24 2:22 PM", "03/04/2024")})
    assert "“날짜 형식”" in ambiguous.text and "--date-format" not in ambiguous.text  # in the page's language
    too_long = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview",
                                               "content": "x" * (MAX_IMPORT_CHARS + 1)})
    assert too_long.status_code == 422 and "more than the 5,000,000 one import takes here" in too_long.text
    assert "x" * 1000 in too_long.text  # the paste is given back to be cut, not lost
    leading = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview"},
                          files={"file": ("t.csv", ("\n" + EXPORT).encode("utf-8"), "text/csv")})
    assert '<textarea id="import-content" name="content" rows="10" maxlength="5000000" spellcheck="false">\n\nKey,' in leading.text
    assert all(item.status != "draft" for item in lib.list_incidents().items)


# Two JSON Lines records of organizations the library knows, as a team's export of another tool has them.
JSONL = ('{"title": "DNS resolvers down for an hour", "summary": "resolvers down", "org": "meta", "date": "2024-02-02", '
         '"url": "https://tickets.example/jl/4"}\n'
         '{"title": "인증서 만료로 접속 불가", "summary": "인증서가 만료되었다", "org": "meta", "date": "2024-03-03", '
         '"url": "https://tickets.example/jl/5"}\n')


def test_an_upload_left_at_the_default_format_is_read_by_its_file_name(client: TestClient, lib: Library) -> None:
    csrf = sign_in(client, lib)
    form = {key: value for key, value in FORM.items() if key not in ("format", "maps")}
    page = client.get("/ui/import", params={"lang": "en"}).text
    assert re.search(r'<option value="" selected>from the file name', page)  # the form does not choose a format
    preview = client.post("/ui/import", data={**form, "csrf": csrf, "action": "preview", "format": ""},
                          files={"file": ("tickets.jsonl", JSONL.encode("utf-8"), "application/x-ndjson")})
    assert preview.status_code == 200, preview.text
    assert "2 record(s) would be added, 0 rejected." in preview.text
    assert "Read as jsonl, from the file name tickets.jsonl" in preview.text
    chosen = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview", "lang": "ko"},
                         files={"file": ("tickets.jsonl", JSONL.encode("utf-8"), "application/x-ndjson")})
    assert "csv 형식으로 읽었습니다." in chosen.text  # a format the user chose wins over the name, and is named
    # read as CSV, the lines of JSON have no column "Key": refused before any record, the format said beside it
    assert chosen.status_code == 422 and "“필드 대응” title=Summary: no record has &#39;Summary&#39;" in chosen.text
    page_of_one = ("<html><body><h1>Cooling loop leak</h1><p>A coolant leak took a row of racks down.</p>"
                   "</body></html>")
    document = client.post("/ui/import", data={**form, "csrf": csrf, "action": "preview", "format": "",
                                               "sets": "org=meta\nsource_url=https://wiki.example/leak"},
                           files={"file": ("2024-03-02-leak.html", page_of_one.encode("utf-8"), "text/html")})
    assert document.status_code == 200, document.text
    assert "1 record(s) would be added, 0 rejected." in document.text  # one postmortem page, not a CSV
    assert "Read as document, from the file name 2024-03-02-leak.html" in document.text
    assert "Cooling loop leak" in document.text


def test_the_preview_rejects_a_record_of_an_unknown_organization_as_the_import_does(client: TestClient, lib: Library) -> None:
    csrf = sign_in(client, lib)
    # the first ticket's company is not in the vocabulary; the second's is, and it has its link this time
    export = EXPORT.replace(",meta,https", ",Acme Payments,https").replace(",meta,\r\n", ",meta,https://tickets.example/OPS-88\r\n")
    preview = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "preview", "content": export})
    assert preview.status_code == 200 and "1 record(s) would be added, 1 rejected." in preview.text
    rejected = preview.text[preview.text.index('class="import-rejected"'):]
    assert "pasted.csv:2" in rejected and "unknown organization &#39;Acme Payments&#39; (acme-payments)" in rejected
    done = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "import", "content": export})
    assert done.status_code == 200 and "1 draft(s) added, 1 record(s) rejected." in done.text  # what the preview said
    assert [d.id for d in lib.drafts()] == ["OPS-0088"] and '<h2 id="h-report">Imported</h2>' in done.text
    again = client.post("/ui/import", data={**FORM, "csrf": csrf, "action": "import", "content": export})
    assert '<h2 id="h-report">Nothing was imported</h2>' in again.text  # both refused now: a duplicate, a new org
    assert lib.vocab.get("acme-payments") is None  # vocabulary is curated in git, never added here


def test_a_dry_run_of_the_live_import_rejects_what_the_import_would(lib: Library, tmp_path: Path) -> None:
    source = tmp_path / "tickets.csv"
    source.write_text(EXPORT.replace(",meta,https", ",Acme Payments,https"), encoding="utf-8")
    maps = FORM["maps"].splitlines()
    dry = lib.import_drafts(source, "csv", maps, id_prefix="OPS", dry_run=True)
    real = lib.import_drafts(source, "csv", maps, id_prefix="OPS")
    assert [r.location for r in dry.rejected] == [r.location for r in real.rejected] == ["tickets.csv:2", "tickets.csv:4"]
    assert dry.new_organizations == real.new_organizations == [] and not real.written


def test_flags_are_renamed_only_as_whole_words() -> None:
    names = {"--map": "“Field mapping”", "--format": "“Format”"}
    message = "--map a=b; is --format wrong? --format-x, x--map, --mapping and --set c stay"
    assert name_options(message, names) == ("“Field mapping” a=b; is “Format” wrong? --format-x, x--map, --mapping and "
                                            "--set c stay")
    for lang in ("en", "ko"):  # every flag a message may name has a label on the form, in both languages
        assert set(_form_names(texts(lang))) == set(IMPORT_FLAGS)
