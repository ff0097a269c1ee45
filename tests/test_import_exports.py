"""Importing the exports of ticket, paging and status-page tools as teams have them: their dates, severities,
statuses, keys, repeated columns, scripts other than Latin, and texts with line breaks and headings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import small_library

from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.importing.dates import parse_date
from incidentlib.loader import check_library


@pytest.fixture()
def target(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "lib", data_dir, ["IL-0101", "IL-0025"])


def stored(target: Path, record_id: str) -> dict:
    return yaml.safe_load((target / "incidents" / f"{record_id}.yaml").read_text(encoding="utf-8"))


def jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.mark.parametrize(("written", "read"), [
    ("2024-03-05T14:22:10Z", "2024-03-05"), ("2024-03-05 14:22:10 UTC", "2024-03-05"), ("2024-03", "2024-03"),
    ("05/Mar/24 2:22 PM", "2024-03-05"),            # Jira
    ("2024년 3월 5일 14:22", "2024-03-05"), ("2024.04.01", "2024-04-01"), ("2024/4/1", "2024-04-01"),
    ("5 March 2024", "2024-03-05"), ("Mar 5, 2024", "2024-03-05"), ("Tue, 05 Mar 2024 14:22:10 +0000", "2024-03-05"),
    ("13/08/2024", "2024-08-13"), ("08/13/2024 10:00", "2024-08-13"), ("12/12/2024", "2024-12-12"),
    ("2024. 3. 5. 오후 2:22:10", "2024-03-05"), ("2024年3月5日", "2024-03-05"),  # Korean spreadsheets, Japanese
    (1709648530, "2024-03-05"), ("1709648530123", "2024-03-05"), (2024, "2024"),
])
def test_dates_whose_form_says_which_part_is_which(written: object, read: str) -> None:
    assert parse_date(written) == read


def test_dates_that_could_be_read_two_ways_ask_for_the_files_form() -> None:
    with pytest.raises(ValueError, match=r"could be day/month or month/day; give the file's form with --date-format"):
        parse_date("03/08/2024 02:00:00")
    assert parse_date("03/08/2024 02:00:00", "%m/%d/%Y %H:%M:%S") == "2024-03-08"
    assert parse_date("03/08/2024", "%d/%m/%Y") == "2024-08-03"
    assert parse_date("2024-03-05", "%d/%m/%Y") == "2024-03-05"  # a value that says which part is which still reads
    with pytest.raises(ValueError, match=r"'2024-02-30' is not a day of the calendar"):
        parse_date("2024-02-30")
    with pytest.raises(ValueError, match=r"'last tuesday' is not a date this import reads"):
        parse_date("last tuesday")
    with pytest.raises(ValueError, match=r"'24\.03\.05' has a two-digit year"):  # 2024-03-05 in Korea, 2005 elsewhere
        parse_date("24.03.05")
    assert parse_date("24.03.05", "%y.%m.%d") == "2024-03-05"
    with pytest.raises(ValueError, match=r"'13/08/2024' does not have the form '%m/%d/%Y'"):  # not read another way
        parse_date("13/08/2024", "%m/%d/%Y")
    with pytest.raises(ValueError, match=r"not a past Unix time"):
        parse_date(9_999_999_999)
    with pytest.raises(ValueError, match=r"names no year"):
        ImportOptions(format=ImportFormat.csv, date_format="%d/%m")


def test_a_jira_export(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "jira.csv"
    source.write_text(
        "Issue key,Project,Summary,Description,Created,Priority,Severity,Status,Labels,Labels,Labels,Link\n"
        'OPS-87,Payments,Checkout returns 502,"h2. Summary\nThe checkout service returned 502 for 20 minutes.\n\n'
        'h2. Errors\nupstream prematurely closed connection\nno live upstreams",05/Mar/24 2:22 PM,P1,SEV-1,Done,'
        "checkout,nginx,,https://jira.example/browse/OPS-87\n"
        "INC0010231,Payments,Disk filled on the log host,The log volume filled.,03/08/2024 02:00:00,P3,1 - Critical,Resolved,"
        ",,,https://jira.example/browse/INC0010231\n", encoding="utf-8")
    options = ImportOptions(format=ImportFormat.csv, maps=["id=Issue key", "title=Summary", "body=Description",
                                                           "org=Project", "source_url=Link"],
                            id_prefix="OPS", date_format="%m/%d/%Y %H:%M:%S")
    report = run_import(source, target, options)
    assert not report.rejected
    first, second = report.accepted
    assert first.id == "OPS-0087"  # the ticket's own key, its number written with four digits
    record = stored(target, "OPS-0087")
    assert record["title"]["en"] == "Checkout returns 502"
    assert record["summary"]["en"].startswith("The checkout service returned 502")  # not "h2."
    assert "upstream prematurely closed connection\nno live upstreams" in record["body"]["en"]  # lines kept
    assert record["tags"] == ["checkout", "nginx"]  # every "Labels" column, not the last
    assert record["date"] == "2024-03-05" and record["severity"] == "sev1" and record["status"] == "draft"
    assert "status: 'Done' is not draft or published; imported as a draft" in first.warnings
    other = stored(target, second.id)
    assert other["date"] == "2024-03-08" and other["severity"] == "sev1"  # "1 - Critical", read with --date-format
    assert other["sources"][0]["title"].startswith("INC0010231: ")  # a key of another form stays with the record
    assert any("id: 'INC0010231' does not have the form OPS-N" in warning for warning in second.warnings)
    assert all("kind" not in source for source in record["sources"])  # a guess is not written: --strict asks for it


def test_severities_on_another_scale_are_left_out_with_a_warning(tmp_path: Path, target: Path) -> None:
    records = [{"title": f"Record {n}", "org": "acme", "source_url": f"https://e.example/{n}", "severity": severity,
                "summary": f"Something different happened, number {n} of them: {word}."}
               for n, (severity, word) in enumerate([("P1", "alpha"), ("Highest", "beta"), ("sev5", "gamma"),
                                                     ("Sev 2", "delta"), ("s3", "epsilon")], 1)]
    report = run_import(jsonl(tmp_path / "sev.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert not report.rejected
    assert [stored(target, row.id).get("severity") for row in report.accepted] == [None, None, None, "sev2", "sev3"]
    assert report.accepted[0].warnings == ["severity: 'P1' is not sev1 to sev4 (map a field that holds them); left out"]


def test_names_in_korean_stay_apart_and_are_found_again(tmp_path: Path, target: Path) -> None:
    records = [{"제목": "결제 지연", "내용": "결제 API 응답이 느려졌다.", "서비스": "결제팀", "링크": "https://e.example/ko/1"},
               {"제목": "배포 실패", "내용": "플랫폼 배포가 중단되었다.", "서비스": "플랫폼팀", "링크": "https://e.example/ko/2"},
               {"제목": "결제 오류", "내용": "카드 승인이 실패했다.", "서비스": "결제팀 A", "링크": "https://e.example/ko/3"}]
    maps = ["title=제목", "summary=내용", "org=서비스", "source_url=링크"]
    report = run_import(jsonl(tmp_path / "ko.jsonl", records), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=maps, lang="ko"))
    orgs = [stored(target, row.id)["org"] for row in report.accepted]
    assert len(set(orgs)) == 3 and all(org.startswith(("organization-", "a-")) for org in orgs)
    again = [{**records[0], "제목": "결제 재지연", "내용": "다시 느려졌다, 이번에는 캐시 때문.", "링크": "https://e.example/ko/4"}]
    second = run_import(jsonl(tmp_path / "ko2.jsonl", again), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=maps, lang="ko"))
    assert stored(target, second.accepted[0].id)["org"] == orgs[0] and second.new_organizations == []
    _, problems = check_library(target)
    assert problems == []


def test_an_organization_and_a_tag_named_alike(tmp_path: Path, target: Path) -> None:
    records = [{"title": "Edge nodes dropped", "org": "edge", "tags": "edge", "source_url": "https://e.example/edge",
                "summary": "The edge fleet dropped connections."}]
    dry = run_import(jsonl(tmp_path / "edge.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl, dry_run=True))
    real = run_import(jsonl(tmp_path / "edge.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert len(dry.accepted) == len(real.accepted) == 1 and real.written
    record = stored(target, real.accepted[0].id)
    assert record["org"] == "edge" and record["tags"] == ["edge-tag"]


def test_status_page_updates_a_title_alone_and_urls_told_apart_by_case(tmp_path: Path, target: Path) -> None:
    page = {"page": {"name": "Acme Status"}, "incidents": [
        {"name": "Elevated API errors", "shortlink": "https://stspg.io/AbC12", "org": "acme",
         "incident_updates": [{"body": "We are investigating."}, {"body": "A bad config push was rolled back."}]},
        {"name": "Dashboard slow to load", "shortlink": "https://stspg.io/abc12", "org": "acme", "incident_updates": []}]}
    source = tmp_path / "status.json"
    source.write_text(json.dumps(page), encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.json, maps=[
        "title=name", "source_url=shortlink", "body=incident_updates[].body"]))
    assert [row.title for row in report.accepted] == ["Elevated API errors", "Dashboard slow to load"]
    updates = stored(target, report.accepted[0].id)
    assert updates["body"]["en"] == "We are investigating.\n\nA bad config push was rolled back."
    alone = stored(target, report.accepted[1].id)
    assert alone["summary"]["en"] == alone["body"]["en"] == "Dashboard slow to load"


def test_why_a_record_is_rejected_names_the_mapping_and_the_way_out(tmp_path: Path, target: Path) -> None:
    # each record has a "page", none a "page.name": the mapping is right for some other export, so each record says
    records = [{"title": "Queue backed up", "source_url": "https://e.example/q1", "org": "acme", "page": {"id": "p1"},
                "summary": "The consumer lag grew until the queue backed up."},
               {"title": "Queue backed up", "source_url": "https://e.example/q2", "org": "acme", "page": {"id": "p1"},
                "summary": "The consumer lag grew until the queue backed up."}]
    report = run_import(jsonl(tmp_path / "again.jsonl", records), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=["org=page.name"]))
    assert [row.reasons for row in report.rejected] == [
        ["no organization (org: nothing at 'page.name')"], ["no organization (org: nothing at 'page.name')"]]
    report = run_import(jsonl(tmp_path / "again.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert report.rejected[0].reasons[0].endswith("(--keep-near-duplicates imports it anyway)")


def test_capitalised_columns_are_found_without_a_mapping(tmp_path: Path, target: Path) -> None:
    records = [{"Title": "Checkout returns 502", "Company": "Acme", "URL": "https://e.example/c",
                "Summary": "Checkout failed for twenty minutes.",
                "Description": "Errors seen:\nupstream prematurely closed connection\nno live upstreams"}]
    report = run_import(jsonl(tmp_path / "caps.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    record = stored(target, report.accepted[0].id)
    assert (record["title"]["en"], record["summary"]["en"], record["org"]) == (
        "Checkout returns 502", "Checkout failed for twenty minutes.", "acme")
    assert record["body"]["en"] == records[0]["Description"]  # the description is the body, its lines kept


def test_set_gives_every_record_a_value_or_one_made_from_its_fields(tmp_path: Path, target: Path) -> None:
    from typer.testing import CliRunner

    from incidentlib.cli import app

    export = {"result": [
        {"number": "INC0010231", "short_description": "Disk filled on the log host", "opened_at": "2024-03-08 02:00:00",
         "description": "The log volume filled after debug logging was left on."},
        {"short_description": "A record without its number", "description": "Nothing to link to."}]}
    source = tmp_path / "servicenow.json"
    source.write_text(json.dumps(export), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(source), "--format", "json", "--into", str(target), "--json",
                                 "--map", "title=short_description", "--set", "org=Acme IT",
                                 "--set", "source_url=https://acme.example/incident.do?number={number}"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    record = stored(target, report["accepted"][0]["id"])
    assert record["org"] == "acme-it" and record["date"] == "2024-03-08"
    assert record["sources"][0]["url"] == "https://acme.example/incident.do?number=INC0010231"
    assert report["rejected"][0]["reasons"] == ["no source URL (source_url: --set found nothing at 'number')"]
    both = runner.invoke(app, ["import", str(source), "--format", "json", "--into", str(target),
                               "--map", "org=company", "--set", "org=Acme IT"])
    assert both.exit_code == 2 and "--set 'org=Acme IT': org is also given by --map" in " ".join(both.stderr.split())
    bad = runner.invoke(app, ["import", str(source), "--format", "json", "--into", str(target), "--set", "org"])
    assert bad.exit_code == 2 and "--set 'org': write FIELD=VALUE" in " ".join(bad.stderr.split())


def test_concept_ids_for_names_in_any_script() -> None:
    from incidentlib.importing.pipeline import slugify

    assert slugify("Acme Corp", "organization") == "acme-corp"  # as before: existing ids keep matching
    assert slugify("Société Générale", "organization") == "societe-generale"  # accents dropped, not the letters
    korean = [slugify(name, "organization") for name in ("결제팀", "플랫폼팀", "결제팀 A", "플랫폼팀 A")]
    assert len(set(korean)) == 4 and korean[0].startswith("organization-") and korean[2].startswith("a-")
    assert slugify("결제팀", "organization") == korean[0]  # stable: the next import finds the same id


def test_review_cases_of_ids_dates_severities_and_names(tmp_path: Path, target: Path) -> None:
    base = {"org": "acme", "source_url": "https://e.example/"}
    records = [
        {**base, "id": "IL-000123", "title": "Six digits", "summary": "An id of six digits stays as written.",
         "source_url": "https://e.example/1"},
        {**base, "title": "A created column", "summary": "Its created column holds a name.", "created": "alice",
         "source_url": "https://e.example/2"},
        {**base, "title": "A range of severities", "summary": "2024. A year of outages.", "severity": "1-2",
         "source_url": "https://e.example/3"}]
    report = run_import(jsonl(tmp_path / "review.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert not report.rejected
    assert report.accepted[0].id == "IL-000123" and not report.accepted[0].warnings
    assert report.accepted[1].warnings == [
        "date 'alice' is not a date this import reads (YYYY-MM-DD, YYYY-MM, YYYY, a month by name, or Unix time); "
        "give the file's form with --date-format (column 'created', read as the date for its name; map one with "
        "--map date=…); left out"]
    assert "date" not in stored(target, report.accepted[1].id)
    assert report.accepted[2].warnings == ["severity: '1-2' is not sev1 to sev4 (map a field that holds them); left out"]
    assert stored(target, report.accepted[2].id)["summary"]["en"] == "2024. A year of outages."
    mapped = run_import(jsonl(tmp_path / "review.jsonl", records[1:2]), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=["date=created"], dry_run=True))
    assert mapped.rejected and "date 'alice'" in mapped.rejected[0].reasons[0]  # asked for by a map: rejected


def test_ids_given_to_names_by_earlier_versions_still_match(tmp_path: Path, target: Path) -> None:
    vocab = target / "vocab" / "imported-organization.yaml"
    vocab.write_text(yaml.safe_dump({"kind": "organization", "concepts": [
        {"id": "caf-corp", "label": {"en": "Café Corporation", "ko": "Café Corporation"},
         "definition": {"en": "Relabelled by a curator."}}]}, allow_unicode=True), encoding="utf-8")
    records = [{"title": "Espresso machines offline", "org": "Café Corp", "source_url": "https://e.example/cafe",
                "summary": "The ordering service lost its database."}]
    report = run_import(jsonl(tmp_path / "cafe.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert report.new_organizations == [] and stored(target, report.accepted[0].id)["org"] == "caf-corp"


def test_a_body_made_from_a_summary_keeps_its_lines_and_not_its_stray_spaces(tmp_path: Path, target: Path) -> None:
    records = [{"title": "Queue backed up", "org": "acme", "source_url": "https://e.example/s",
                "summary": "Lag  grew.\n\n\n\nERROR 1040:   too many connections\nERROR 2013"}]
    report = run_import(jsonl(tmp_path / "spaces.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    record = stored(target, report.accepted[0].id)
    assert record["body"]["en"] == "Lag grew.\n\nERROR 1040: too many connections\nERROR 2013"
    assert record["summary"]["en"] == "Lag grew. ERROR 1040: too many connections ERROR 2013"


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_a_bilingual_archive_stores_each_text_under_its_own_language(tmp_path: Path, target: Path, lang: str) -> None:
    records = [{"title": "NCCL all-reduce hung on one rack", "org": "acme", "source_url": "https://e.example/l1",
                "summary": "The leaf switch flapped and every rank waited."},
               {"title": "GPU 노드에서 NCCL all-reduce 타임아웃", "org": "acme", "source_url": "https://e.example/l2",
                "summary": "리프 스위치가 흔들려서 모든 랭크가 기다렸다. Xid 79 도 보였다."},
               {"title": "Checkout 502 after the 결제 release", "org": "acme", "source_url": "https://e.example/l3",
                "summary": "The payments release broke the checkout path."}]
    report = run_import(jsonl(tmp_path / "mixed.jsonl", records), target,
                        ImportOptions(format=ImportFormat.jsonl, lang=lang))
    stored_langs = [sorted(stored(target, row.id)["title"]) for row in report.accepted]
    # English text is English and Korean text Korean whatever --lang says; a text with a Korean word in English
    # prose is English (--lang decides only where the letters do not)
    assert stored_langs == [["en"], ["ko"], ["en"]]
    assert stored(target, report.accepted[1].id)["summary"] == {"ko": records[1]["summary"]}


def test_a_language_of_only_spaces_is_missing_not_imported(tmp_path: Path, target: Path) -> None:
    records = [{"title": {"en": "Power feed lost", "ko": "  "}, "org": "acme", "source_url": "https://e.example/b1",
                "summary": {"en": "One of two feeds dropped.", "ko": " "}, "body.ko": "   "},
               {"title": "   ", "summary": " ", "org": "acme", "source_url": "https://e.example/b2"}]
    dry = run_import(jsonl(tmp_path / "blank.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl, dry_run=True))
    real = run_import(jsonl(tmp_path / "blank.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert len(dry.accepted) == len(real.accepted) == 1 and real.written  # the dry run says what the import does
    assert stored(target, real.accepted[0].id)["title"] == {"en": "Power feed lost"}
    assert [row.reasons for row in real.rejected] == [["no title, summary or body text (map one with --map title=…)"]]
