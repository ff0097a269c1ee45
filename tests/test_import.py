from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import small_library
from typer.testing import CliRunner

from incidentlib.cli import REPEATS_SHOWN, app
from incidentlib.importing import FieldMap, ImportFailed, ImportFormat, ImportOptions, MappingError, run_import
from incidentlib.importing.mapping import get_path
from incidentlib.importing.readers import read_csv
from incidentlib.loader import check_library, content_hash

MARKDOWN = """# Public postmortems

## Config Errors

[Allegro](https://allegro.tech/2018/08/postmortem-why-allegro-went-down.html). The Allegro platform suffered a failure
of a subsystem responsible for asynchronous distributed task processing.

[Cloudflare](https://blog.cloudflare.com/details-of-the-cloudflare-outage-on-july-2-2019/). A WAF rule with a bad
regular expression exhausted CPU on every edge server.

## Hardware

- [Example Cloud](https://example.org/postmortems/gpu). A GPU fell off the bus and NCCL timed out on every rank.
"""

FOREIGN = [
    {"headline": "Consumers stalled after a deploy", "company": "Acme Corp", "when": "2023-05-04T10:00:00Z",
     "links": [{"href": "https://acme.example/pm/1"}], "labels": [{"name": "saas"}],
     "details": "A deploy changed the Kafka consumer configuration and consumers stalled; clients saw 503 errors."},
    {"headline": "A record with no link", "company": "Acme Corp", "details": "Nothing to cite."},
    {"headline": "A record with a bad date", "company": "Acme Corp", "when": "last tuesday",
     "links": [{"href": "https://acme.example/pm/3"}]},
]
MAPS = ["title=headline", "org=company", "date=when", "source_url=links[0].href", "tags=labels[].name", "body=details"]


@pytest.fixture()
def target(tmp_path: Path, data_dir: Path) -> Path:
    return small_library(tmp_path / "lib", data_dir, ["IL-0101", "IL-0076", "IL-0025"])


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*.yaml")}


def test_markdown_list_import(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.markdown))
    assert report.written
    assert [r.duplicate_of for r in report.rejected] == ["IL-0101"]  # same URL as the curated Cloudflare record
    assert len(report.accepted) == 2
    _, problems = check_library(target)
    assert problems == []
    allegro = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert allegro["status"] == "draft" and allegro["org"] == "allegro"
    assert allegro["tags"] == ["config-errors"]  # the heading became a tag
    assert "asynchronous distributed task processing" in allegro["summary"]["en"]  # continuation line joined
    gpu = yaml.safe_load((target / "incidents" / f"{report.accepted[1].id}.yaml").read_text(encoding="utf-8"))
    assert gpu["tags"] == ["hardware"]  # an existing tag, found by its id
    # recognised concepts are inferred links with evidence and provenance, never asserted
    suggested = {(s["kind"], s["concept"]) for s in gpu["inferred"]}
    assert {("component", "nccl"), ("symptom", "gpu-fell-off-bus")} <= suggested
    nccl = next(s for s in gpu["inferred"] if s["concept"] == "nccl")
    assert nccl["method"] == "alias" and "NCCL" in nccl["evidence"] and 0 < nccl["confidence"] <= 1
    assert "components" not in gpu and "symptoms" not in gpu
    assert "allegro" in report.new_organizations and "config-errors" in report.new_tags
    assert (target / "vocab" / "imported-organization.yaml").exists()


@pytest.mark.parametrize("fmt", ["json", "jsonl", "yaml", "csv"])
def test_structured_formats_with_field_mapping(tmp_path: Path, target: Path, fmt: str) -> None:
    source = tmp_path / f"collection.{fmt}"
    maps = list(MAPS)
    if fmt == "json":
        source.write_text(json.dumps({"postmortems": FOREIGN}), encoding="utf-8")
    elif fmt == "jsonl":
        source.write_text("\n".join(json.dumps(r) for r in FOREIGN), encoding="utf-8")
    elif fmt == "yaml":
        source.write_text(yaml.safe_dump(FOREIGN), encoding="utf-8")
    else:
        header = "headline,company,when,link,labels,details\n"
        rows = [
            'Consumers stalled after a deploy,Acme Corp,2023-05-04,https://acme.example/pm/1,saas,"A deploy changed the Kafka consumer configuration; 503 errors."',
            "A record with no link,Acme Corp,,,,Nothing to cite.",
            "A record with a bad date,Acme Corp,last tuesday,https://acme.example/pm/3,,",
        ]
        source.write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
        maps = ["title=headline", "org=company", "date=when", "source_url=link", "tags=labels", "body=details"]
    report = run_import(source, target, ImportOptions(format=ImportFormat(fmt), maps=maps))
    assert [a.title for a in report.accepted] == ["Consumers stalled after a deploy"]
    assert len(report.rejected) == 2
    no_link, bad_date = report.rejected  # rejections keep input order
    assert any("no source URL" in r for r in no_link.reasons) and not any("date" in r for r in no_link.reasons)
    assert any("date 'last tuesday' is not a date this import reads" in r for r in bad_date.reasons)
    assert not any("source URL" in r for r in bad_date.reasons)
    assert all(r.location.startswith(source.name) for r in report.rejected)
    assert no_link.location != bad_date.location
    written = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert written["date"] == "2023-05-04" and written["org"] == "acme-corp" and written["tags"] == ["saas"]
    assert written["sources"][0]["url"] == "https://acme.example/pm/1"
    queue = next(link for link in written["inferred"] if link["concept"] == "message-queue")  # an inferred link, not asserted
    assert queue["kind"] == "component" and queue["method"] == "alias" and "Kafka" in queue["evidence"]


@pytest.mark.slow
def test_near_duplicate_text_is_reported(tmp_path: Path, target: Path, library) -> None:
    curated = library.get("IL-0076")
    source = tmp_path / "dup.jsonl"
    source.write_text(json.dumps({"title": curated.title.en, "summary": curated.summary.en, "org": "AWS",
                                  "url": "https://example.org/another-copy"}) + "\n", encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, dry_run=True))
    assert report.rejected[0].duplicate_of == "IL-0076"
    assert "similar" in report.rejected[0].reasons[0]
    kept = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, dry_run=True, keep_near_duplicates=True))
    assert len(kept.accepted) == 1


@pytest.mark.slow
def test_dry_run_writes_nothing(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    before = files(target)
    report = run_import(source, target, ImportOptions(format=ImportFormat.markdown, dry_run=True))
    assert report.accepted and not report.written
    assert files(target) == before


def test_a_failed_write_leaves_the_library_untouched(tmp_path: Path, target: Path, monkeypatch) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    before = files(target)
    import incidentlib.importing.pipeline as pipeline

    def broken(*args, **kwargs):  # noqa: ANN002
        return None, [type("P", (), {"__str__": lambda self: "simulated problem"})()]

    monkeypatch.setattr(pipeline, "check_library", lambda root, _real=pipeline.check_library, **options:
                        broken() if "incidentlib-import-" in str(root) else _real(root, **options))
    with pytest.raises(ImportFailed, match="nothing was written"):
        run_import(source, target, ImportOptions(format=ImportFormat.markdown))
    assert files(target) == before


def test_the_check_takes_documents_just_written_as_what_their_files_hold(tmp_path: Path, target: Path) -> None:
    """An import checks its new records from the documents it dumped; every other file is parsed as always."""
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    run_import(source, target, ImportOptions(format=ImportFormat.markdown))
    data, problems = check_library(target)
    assert data is not None and not problems
    name = sorted((target / "incidents").glob("*.yaml"))[-1]
    rel = f"incidents/{name.name}"
    document = yaml.safe_load(name.read_text(encoding="utf-8"))
    name.write_text("title: [unclosed\n", encoding="utf-8")  # what the file holds now does not parse
    assert any(problem.file == rel for problem in check_library(target)[1])
    taken, problems = check_library(target, written={rel: document})
    assert not problems and taken is not None and document["id"] in taken.incidents
    # given its bytes too, the file is not read back: the library's hash is of the bytes given
    from incidentlib.parsed_cache import WrittenFile

    given = WrittenFile(payload=b"# as written\n", document=document)
    taken_bytes, problems = check_library(target, written={rel: given})
    assert not problems and taken_bytes is not None and document["id"] in taken_bytes.incidents
    name.write_bytes(given.payload)
    assert taken_bytes.content_hash == content_hash(target) != taken.content_hash
    with pytest.raises(ValueError, match="parse cache"):
        check_library(target, tmp_path / "cache", written={rel: document})


def test_the_check_takes_each_new_record_as_validating_its_written_file_gives(tmp_path: Path, target: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An import hands the check its validated incidents; each equals the incident its file validates to, for the
    bundled records' texts in both languages, with dates, organisations, sources, tags and inferred links."""
    import incidentlib.importing.pipeline as pipeline
    from incidentlib import Library
    from incidentlib.models import Incident
    from incidentlib.parsed_cache import WrittenFile

    records = []
    for n, incident in enumerate(Library.open().incidents()[:60]):
        records.append({"title": incident.title.en if n % 2 else incident.title.ko, "summary": incident.summary.en,
                        "body": incident.body.ko if n % 3 == 0 else incident.body.en, "org": incident.org,
                        "date": incident.date, "url": f"https://tickets.example/{n}", "tags": "gpu; postmortem",
                        "severity": "SEV1" if n % 4 == 0 else None})
    taken: list[dict[str, object]] = []

    def check(root: Path, *args: object, **options: object) -> object:
        written = options.get("written")
        if written:
            taken.append(dict(written))  # type: ignore[call-overload]
        return real(root, *args, **options)

    real = pipeline.check_library
    monkeypatch.setattr(pipeline, "check_library", check)
    report = run_import(jsonl(tmp_path / "records.jsonl", records), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=["tags=tags"]))
    assert report.written and len(report.accepted) >= 50 and len(taken) == 1  # a copy of a record there is rejected
    assert sorted(taken[0]) == sorted(f"incidents/{row.id}.yaml" for row in report.accepted)
    for rel, written in taken[0].items():
        assert isinstance(written, WrittenFile) and isinstance(written.document, Incident)
        payload = (target / rel).read_bytes()
        assert written.payload == payload, rel  # the bytes the check takes are the file's
        assert Incident.model_validate(yaml.safe_load(payload)) == written.document, rel
    assert any(written.document.inferred for written in taken[0].values())  # type: ignore[attr-defined]


def test_new_library_directory_is_created_or_not_left_behind(tmp_path: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    fresh = tmp_path / "fresh"
    report = run_import(source, fresh, ImportOptions(format=ImportFormat.markdown))
    assert len(report.accepted) == 3 and check_library(fresh)[1] == []
    missing = tmp_path / "never"
    with pytest.raises(ImportFailed):
        run_import(tmp_path / "nope.md", missing, ImportOptions(format=ImportFormat.markdown))
    assert not missing.exists()


def test_mapping_errors_and_paths() -> None:
    for bad, message in (("title", "FIELD=SOURCE"), ("nope=x", "unknown field 'nope'"), ("title=a..b", "cannot read source path")):
        with pytest.raises(MappingError, match=message):
            FieldMap.parse(bad)
    record = {"a": {"b": [{"c": 1}, {"c": 2}]}, "links": [{"href": "u"}]}
    assert get_path(record, "a.b[1].c") == 2
    assert get_path(record, "a.b[].c") == [1, 2]
    assert get_path(record, "links[0].href") == "u"


def test_unreadable_input_is_a_clear_error(tmp_path: Path, target: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ImportFailed, match=r"bad\.json: not valid JSON"):
        run_import(bad, target, ImportOptions(format=ImportFormat.json))
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"title": "ok"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ImportFailed, match=r"bad\.jsonl:2"):
        run_import(lines, target, ImportOptions(format=ImportFormat.jsonl))


def test_import_command(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(source), "--format", "markdown", "--into", str(target), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["written"] and len(report["accepted"]) == 2 and len(report["rejected"]) == 1
    mixed = jsonl(tmp_path / "mixed.jsonl", [
        {"title": "First", "org": "acme", "source_url": "https://e.example/m1", "summary": "A cache tier fell over."},
        {"title": "Second, without a link", "org": "acme", "summary": "Nothing to cite."},
        {"title": "Third", "org": "acme", "source_url": "https://e.example/m3", "summary": "A certificate expired."}])
    in_order = runner.invoke(app, ["import", str(mixed), "--format", "jsonl", "--into", str(target), "--dry-run"])
    rows = [line.split()[0] for line in in_order.stdout.splitlines() if line.startswith(("✓", "✗"))]
    assert rows == ["✓", "✗", "✓"]  # the report follows the file, rejected rows among the others
    again = runner.invoke(app, ["import", str(source), "--format", "markdown", "--into", str(target)])
    assert again.exit_code == 1  # everything is now a duplicate
    assert "same source URL" in again.stdout
    bad_map = runner.invoke(app, ["import", str(source), "--format", "json", "--into", str(target), "--map", "oops"])
    assert bad_map.exit_code == 2 and "FIELD=SOURCE" in bad_map.stderr
    assert " ".join(bad_map.stderr.split()).startswith("error: --map 'oops':")  # the option, not the parameter's name
    prefix = runner.invoke(app, ["import", str(source), "--format", "markdown", "--into", str(target), "--id-prefix", "il"])
    assert prefix.exit_code == 2 and " ".join(prefix.stderr.split()).startswith("error: --id-prefix: 'il' must be")
    no_target = runner.invoke(app, ["import", str(source), "--format", "markdown"], env={"INCIDENTLIB_DATA": ""})
    assert no_target.exit_code == 2 and "--into" in no_target.stderr


def jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_two_records_of_one_import_never_share_an_id(tmp_path: Path, target: Path) -> None:
    """Each id a record names is claimed by the first record naming it: a second record naming it gets a new id with
    a warning (it used to overwrite the first without a word), and the ids made up for records without one skip every
    named id, wherever in the file it comes."""
    texts = [("DNS resolver outage", "Resolvers stopped answering after a bad config push."),
             ("Expired TLS certificate", "A certificate expired and clients failed the handshake."),
             ("Disk full on the build farm", "Logs filled the build farm's disks."),
             ("Kafka consumers stalled", "A deploy changed the consumer configuration."),
             ("Fan failure in rack 12", "A fan failed and the rack's GPUs throttled.")]
    records = [{"title": title, "summary": summary, "org": "acme", "source_url": f"https://example.com/{n}"}
               for n, (title, summary) in enumerate(texts)]
    records[1]["id"] = "IL-0001"  # named after a record without an id, which must not take it
    records[2]["id"] = records[3]["id"] = "IL-0700"  # the same id twice
    fresh = tmp_path / "new"
    report = run_import(jsonl(tmp_path / "dup.jsonl", records), fresh, ImportOptions(format=ImportFormat.jsonl))
    assert [row.id for row in report.accepted] == ["IL-0002", "IL-0001", "IL-0700", "IL-0003", "IL-0004"]
    assert [row.warnings for row in report.accepted] == [
        [], [], [], ["id: 'IL-0700' is named by dup.jsonl:3 earlier in this import; imported as IL-0003"], []]
    data, problems = check_library(fresh)
    assert not problems and data is not None
    assert {data.incidents[row.id].title.get("en") for row in report.accepted} == {title for title, _ in texts}
    # a named id first, then a record without one: the made-up id skips it
    pair = [{**records[0], "id": "IL-0001"}, {**records[1], "id": None}]
    again = run_import(jsonl(tmp_path / "pair.jsonl", pair), tmp_path / "other", ImportOptions(format=ImportFormat.jsonl))
    assert [row.id for row in again.accepted] == ["IL-0001", "IL-0002"]
    # an id the library holds, or one of another form or shape, is replaced with a warning saying so
    taken = [{"id": "IL-0025", "title": "Another NCCL hang", "summary": "Ranks stopped.", "org": "acme",
              "source_url": "https://example.com/x"},
             {"id": "not-an-id", "title": "Fan failure", "summary": "A fan failed.", "org": "acme",
              "source_url": "https://example.com/y"},
             {"id": {"$oid": "65a1"}, "title": "PSU failure", "summary": "A power supply failed.", "org": "acme",
              "source_url": "https://example.com/z"}]
    third = run_import(jsonl(tmp_path / "taken.jsonl", taken), target, ImportOptions(format=ImportFormat.jsonl))
    assert [row.warnings[0].split(";")[0] for row in third.accepted] == [
        "id: 'IL-0025' is an incident of the library already",
        "id: 'not-an-id' does not have the form IL-N (1 to 6 digits)",
        "id: \"{'$oid': '65a1'}\" is not a single value"]


def test_fields_of_the_wrong_shape_are_rejected_with_the_field_named(tmp_path: Path, target: Path) -> None:
    base = {"summary": "Something broke.", "org": "acme"}
    records = [{**base, "title": "A", "org": ["acme", "beta"], "source_url": "https://e.example/1"},
               {**base, "title": {"text": "x"}, "source_url": "https://e.example/2"},
               {**base, "title": "C", "tags": {"x": 1}, "source_url": "https://e.example/3"},
               {**base, "title": {"en": "Fine", "ko": "괜찮음"}, "tags": ["a"], "source_url": ["https://e.example/4"]},
               # optional lists of names given as objects are left out with a warning, an empty title is missing
               {"summary": "The payment queue backed up for an hour.", "org": "acme", "title": {}, "impact": {"users": 1000},
                "source_url": "https://e.example/5"}]
    report = run_import(jsonl(tmp_path / "shape.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert [row.title for row in report.accepted] == ["Fine", "The payment queue backed up for an hour."]
    assert report.accepted[1].warnings == ["symptoms: an object, not a value or a list of values; left out"]
    assert [row.reasons for row in report.rejected] == [
        ["org: expected one value, got a list"],
        ["title: an object must hold the text under 'en' and/or 'ko', got 'text'"],
        ["tags: expected a value or a list of values, got an object"]]
    assert "acme-beta" not in (target / "vocab" / "imported-organization.yaml").read_text(encoding="utf-8")


def test_unusable_files_and_options_are_named(tmp_path: Path, target: Path) -> None:
    from incidentlib import Library
    from incidentlib.errors import InvalidRequest

    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"title": "ok"}\n{"title": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(ImportFailed, match=r"latin1\.jsonl:2: not UTF-8 text"):
        run_import(latin1, target, ImportOptions(format=ImportFormat.jsonl))
    with pytest.raises(ImportFailed, match="a folder; a folder of postmortems, one per file, is read with --format document"):
        run_import(tmp_path, target, ImportOptions(format=ImportFormat.jsonl))
    before = files(target)
    with pytest.raises(InvalidRequest, match=r"format: 'jsonx' is not one of yaml, json, jsonl, csv, markdown") as wrong:
        Library.import_records(latin1, target, "jsonx", [])
    assert wrong.value.parameter == "format"
    with pytest.raises(InvalidRequest, match=r"id_prefix: 'il' must be 2 to 8 capital letters") as prefix:
        Library.import_records(latin1, target, "jsonl", [], id_prefix="il")
    assert prefix.value.parameter == "id_prefix"
    assert files(target) == before


def test_a_csv_saved_with_a_byte_order_mark_reads_its_first_column(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "sheet.csv"
    source.write_bytes("\ufefftitle,org,source_url,summary\nQueue backed up,acme,https://e.example/q,The queue backed up.\n"
                       .encode("utf-8"))
    report = run_import(source, target, ImportOptions(format=ImportFormat.csv))
    assert [row.title for row in report.accepted] == ["Queue backed up"] and not report.rejected


def test_csv_fields_spanning_lines_keep_their_breaks_and_records_their_lines(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "tickets.csv"
    source.write_text('title,org,source_url,body\r\n'
                      'Queue backed up,acme,https://e.example/q,"The consumer lag grew.\r\n\r\nWe restarted, then it drained."\r\n'
                      '\r\n'
                      'Disk filled,acme,https://e.example/d,"Logs, ""debug"" level, filled /var"\r\n', encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.csv))
    assert [(row.location, row.title) for row in report.accepted] == [
        ("tickets.csv:2", "Queue backed up"), ("tickets.csv:6", "Disk filled")]
    queue = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert queue["body"]["en"] == "The consumer lag grew.\n\nWe restarted, then it drained."
    disk = yaml.safe_load((target / "incidents" / f"{report.accepted[1].id}.yaml").read_text(encoding="utf-8"))
    assert disk["body"]["en"] == 'Logs, "debug" level, filled /var'


@pytest.mark.parametrize("separator", [",", ";", "\t"])
def test_csv_separator_is_the_one_that_splits_rows_like_the_header(separator: str) -> None:
    # a question used as a column name (as form tools write them) holds another separator more often than the
    # header holds its own
    other, third = (d for d in (",", ";", "\t") if d != separator)
    question = f"What did you try{other} restart{other} failover{other} rollback{third} scale up{other} or nothing"
    rows = [["title", "org", "source_url", question], ["Queue backed up", "acme", "https://e.example/q", "Lag grew 1.5 h"],
            ["Disk full", "acme", "https://e.example/d", "nothing"]]
    records = read_csv("".join(separator.join(row) + "\n" for row in rows), "sheet.csv")
    assert [record.data for record in records] == [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]


@pytest.mark.parametrize("separator", [";", "\t"])
def test_csv_separated_by_semicolons_or_tabs(tmp_path: Path, target: Path, separator: str) -> None:
    source = tmp_path / "sheet.csv"
    rows = [["title", "org", "source_url", "summary"], ["Queue backed up", "acme", "https://e.example/q", "Lag grew, 1,5 h"]]
    source.write_text("".join(separator.join(row) + "\n" for row in rows), encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.csv))
    assert [row.title for row in report.accepted] == ["Queue backed up"] and not report.rejected
    stored = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert stored["summary"]["en"] == "Lag grew, 1,5 h"


def test_csv_leading_blank_lines_an_excel_separator_line_blank_rows_and_a_stray_quote() -> None:
    text = ('\n  \nsep=;\ntitle;org;summary\nA;acme;The "hot" shard\n ; \n\nB;acme;Said "no" then "yes"\n')
    records = read_csv(text, "sheet.csv")
    assert [(record.location, record.data["summary"]) for record in records] == [
        ("sheet.csv:5", 'The "hot" shard'), ("sheet.csv:8", 'Said "no" then "yes"')]
    lenient = read_csv('title,summary\nA,"Quoted" then text\n', "sheet.csv")  # as a spreadsheet would show it
    assert lenient[0].data["summary"] == "Quoted then text"


def test_a_csv_quote_left_open_names_its_line_and_writes_nothing(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "open.csv"
    source.write_text('title,org,source_url,summary\nA,acme,https://e.example/a,fine\n'
                      'B,acme,https://e.example/b,"never closed\nC,acme,https://e.example/c,swallowed\n', encoding="utf-8")
    before = files(target)
    with pytest.raises(ImportFailed, match=r"open\.csv:3: not valid CSV: a quoted field of the record on this line is "
                                           r"never closed"):
        run_import(source, target, ImportOptions(format=ImportFormat.csv))
    assert files(target) == before


def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path: Path, target: Path) -> None:
    record = {"title": "Paging storm", "org": "acme", "source_url": "https://e.example/p",
              "body": "First paragraph.\u2028Second line.\u000cAfter a form feed."}
    source = tmp_path / "export.jsonl"
    source.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl))
    assert [row.title for row in report.accepted] == ["Paging storm"] and not report.rejected
    stored = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert stored["body"]["en"] == record["body"]


def test_signals_are_kept_verbatim_in_every_shape_the_library_writes(tmp_path: Path, target: Path) -> None:
    log = "NCCL WARN [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) | 600000 ms"
    base = {"org": "acme"}
    records = [{**base, "title": "Listed", "source_url": "https://e.example/1", "summary": "Training stalled.",
                "signals": [log, {"text": "Xid 79; GPU has fallen off the bus", "note": "the GPU left the PCIe bus"},
                            {"text": "ECC error", "note": {"en": "memory", "ko": "메모리"}}, {"note": "no text"},
                            [{"text": "nested", "note": ["not", "a note"]}]]},
               {**base, "title": "One object", "source_url": "https://e.example/2", "summary": "A job hung at startup.",
                "signals": {"text": log}},
               {**base, "title": "Lines", "source_url": "https://e.example/3", "summary": "Checkpoints were lost.",
                "signals": f"{log}\nsecond; line\n"}]
    report = run_import(jsonl(tmp_path / "signals.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    assert [row.warnings for row in report.accepted] == [
        ["signals: an object without a 'text' string; left out",
         "signals: the note of 'nested' is neither text nor an object with 'en' and/or 'ko'; left out"], [], []]
    stored = [yaml.safe_load((target / "incidents" / f"{row.id}.yaml").read_text(encoding="utf-8"))["signals"]
              for row in report.accepted]
    texts = [[s if isinstance(s, str) else s["text"] for s in signals] for signals in stored]
    assert texts == [[log, "Xid 79; GPU has fallen off the bus", "ECC error", "nested"], [log], [log, "second; line"]]
    assert stored[0][1]["note"] == {"en": "the GPU left the PCIe bus"}
    assert stored[0][2]["note"] == {"en": "memory", "ko": "메모리"}
    _, problems = check_library(target)
    assert problems == []


def test_a_list_item_is_one_value_and_a_single_value_splits_like_a_cell(tmp_path: Path, target: Path) -> None:
    base = {"org": "acme"}
    records = [{**base, "title": "Items", "summary": "The cache tier fell over.", "source_url": "https://e.example/1",
                "tags": ["a;b", "c"]},
               {**base, "title": "Cell", "summary": "A certificate expired.", "source_url": "https://e.example/2",
                "tags": "a;b|c"}]
    report = run_import(jsonl(tmp_path / "tags.jsonl", records), target, ImportOptions(format=ImportFormat.jsonl))
    tags = [yaml.safe_load((target / "incidents" / f"{row.id}.yaml").read_text(encoding="utf-8"))["tags"]
            for row in report.accepted]
    assert tags[1] == ["a", "b", "c"]
    assert len(tags[0]) == 2 and tags[0][1] == "c"


def _interrupt_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    """Make ``module.name`` raise KeyboardInterrupt (as Ctrl-C would) the first time it is called."""
    real = getattr(module, name)
    calls = []

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)


def test_ctrl_c_before_the_commit_says_nothing_was_imported(tmp_path: Path, target: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib import journal

    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    before = files(target)
    _interrupt_once(monkeypatch, journal, "atomic_write_text")  # the first staged file: before the commit point
    result = CliRunner().invoke(app, ["import", str(source), "--format", "markdown", "--into", str(target)])
    assert result.exit_code == 130
    assert "interrupted: nothing was imported" in " ".join(result.output.split())
    assert files(target) == before and not (target / journal.JOURNAL_DIR).exists()


def test_ctrl_c_after_the_commit_completes_the_import_at_once(tmp_path: Path, target: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from incidentlib import journal

    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    before = set(files(target))
    _interrupt_once(monkeypatch, journal, "_roll_forward")  # the manifest is written: the import is committed
    result = CliRunner().invoke(app, ["import", str(source), "--format", "markdown", "--into", str(target)])
    assert result.exit_code == 130
    assert "the import had been committed and is now complete" in " ".join(result.output.split())
    added = set(files(target)) - before
    assert len([name for name in added if name.startswith("incidents/")]) == 2
    assert not (target / journal.JOURNAL_DIR).exists()
    _, problems = check_library(target)
    assert problems == []


def test_ctrl_c_during_an_index_build_says_how_to_resume(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from incidentlib import Library

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Library, "build_index", stopped)
    result = CliRunner().invoke(app, ["index", "--cache", str(tmp_path / "cache")])
    assert result.exit_code == 130
    said = " ".join(result.output.split())
    assert "interrupted: the index is not built" in said and "run the same command again to resume" in said


@pytest.mark.parametrize("existing", [False, True], ids=["new folder", "empty folder"])
def test_ctrl_c_into_a_new_library_says_what_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      existing: bool) -> None:
    from incidentlib import journal

    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    early, late = tmp_path / "early", tmp_path / "late"
    if existing:
        early.mkdir()
        late.mkdir()
    runner = CliRunner()
    with monkeypatch.context() as patch:
        _interrupt_once(patch, shutil, "copytree")  # a new library's first step: the bundled vocabulary copied in
        stopped = runner.invoke(app, ["import", str(source), "--format", "markdown", "--into", str(early)])
    assert stopped.exit_code == 130 and "nothing was imported" in " ".join(stopped.output.split())
    assert early.is_dir() == existing and (not existing or not any(early.iterdir()))  # as it was
    with monkeypatch.context() as patch:
        _interrupt_once(patch, journal, "_fsync_dir")  # the first call follows the rename into place
        done = runner.invoke(app, ["import", str(source), "--format", "markdown", "--into", str(late)])
    assert done.exit_code == 130 and "is now complete" in " ".join(done.output.split())
    _, problems = check_library(late)
    assert problems == [] and len(list((late / "incidents").glob("*.yaml"))) == 3


def test_a_dry_run_into_an_empty_folder_leaves_it_there(tmp_path: Path) -> None:
    source = tmp_path / "list.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    report = run_import(source, empty, ImportOptions(format=ImportFormat.markdown, dry_run=True))
    assert len(report.accepted) == 3 and empty.is_dir() and not any(empty.iterdir())


def test_the_formats_the_adapters_offer_are_the_formats_the_importer_reads() -> None:
    from incidentlib.requests import FORMAT_BY_SUFFIX, IMPORT_FORMATS

    assert sorted(IMPORT_FORMATS) == sorted(f.value for f in ImportFormat)
    assert set(FORMAT_BY_SUFFIX.values()) == set(IMPORT_FORMATS)  # every format can be told by some suffix


def test_the_format_left_out_is_read_from_the_file_s_suffix_and_a_name_that_tells_none_is_refused(
        tmp_path: Path, target: Path) -> None:
    from incidentlib.requests import format_of_name

    assert [format_of_name(name) for name in ("a.CSV", "x.ndjson", "list.markdown", "incidents.yml", "export.txt",
                                               "noext", "archive.tar.gz", "2024-03-02-outage.HTML")] == [
        "csv", "jsonl", "markdown", "yaml", None, None, None, "document"]
    records = [{"title": "The cache tier fell over", "org": "acme", "source_url": "https://e.example/f1",
                "summary": "A cache tier fell over after a deploy."}]
    runner = CliRunner()
    read = runner.invoke(app, ["import", str(jsonl(tmp_path / "export.JSONL", records)), "--into", str(target),
                               "--json"])
    assert read.exit_code == 0, read.output
    assert len(json.loads(read.stdout)["accepted"]) == 1  # read as JSON lines: as CSV it would have no title column
    unnamed = jsonl(tmp_path / "export.txt", records)
    refused = runner.invoke(app, ["import", str(unnamed), "--into", str(tmp_path / "other")])
    message = " ".join(refused.stderr.split())
    assert refused.exit_code == 2 and message.startswith("error: --format: the name 'export.txt' does not tell")
    assert "csv" in message and not (tmp_path / "other").exists()
    missing = runner.invoke(app, ["import", str(tmp_path / "exports"), "--into", str(tmp_path / "other")])
    assert missing.exit_code == 2 and "exports: no such file or folder" in " ".join(missing.stderr.split())
    named = runner.invoke(app, ["import", str(unnamed), "--format", "jsonl", "--into", str(tmp_path / "other"),
                                "--dry-run"])
    assert named.exit_code == 0, named.output


def test_an_export_s_shared_problem_is_said_a_few_times_then_counted_and_unread_columns_are_named(
        tmp_path: Path, target: Path) -> None:
    tickets = [{"key": f"OPS-{n}", "summary": f"Ticket {n}: the cache tier fell over again", "status": "Resolved",
                "priority": "P2", "service": "checkout", "assignee": "" if n % 2 else "kim"} for n in range(1, 9)]
    source = jsonl(tmp_path / "tickets.jsonl", tickets)
    runner = CliRunner()
    refused = runner.invoke(app, ["import", str(source), "--format", "jsonl", "--into", str(target), "--dry-run"])
    lines = refused.stdout.splitlines()
    assert refused.exit_code == 1 and sum(line.startswith("✗") for line in lines) == REPEATS_SHOWN
    assert f"… {8 - REPEATS_SHOWN} more record(s) with: no organization" in refused.stdout
    assert "not imported (no field is taken from them): key, priority, service, assignee" in refused.stdout
    accepted = runner.invoke(app, ["import", str(source), "--format", "jsonl", "--into", str(target), "--dry-run",
                                   "--set", "org=acme", "--set", "source_url=https://tickets.example/{key}"])
    assert accepted.exit_code == 0, accepted.output
    assert sum(line.startswith("    !") for line in accepted.stdout.splitlines()) == REPEATS_SHOWN
    assert f"… {8 - REPEATS_SHOWN} more record(s) with: status: 'Resolved'" in accepted.stdout
    # key is read by the --set template, summary and status by their defaults; the rest is named, empty values not
    assert "not imported (no field is taken from them): priority, service, assignee" in accepted.stdout
    report = json.loads(runner.invoke(app, ["import", str(source), "--format", "jsonl", "--into", str(target), "--dry-run",
                                            "--set", "org=acme", "--set", "source_url=https://tickets.example/{key}",
                                            "--json"]).stdout)
    assert report["unread_columns"] == ["priority", "service", "assignee"] and len(report["accepted"]) == 8
    # a target given in part (title.ko) takes nothing from its default column, which is then named
    from incidentlib.importing.mapping import FieldMap, unread_keys

    row = {"title": "Disk full", "제목": "디스크 가득 참", "summary": "x", "org": "acme", "service": "db", 1: "one"}
    assert unread_keys(row, [FieldMap.parse("title.ko=제목")]) == ["title", "service", "1"]


def test_a_column_quoted_by_a_set_template_still_gives_its_own_field(tmp_path: Path, target: Path) -> None:
    """``--set source_url=…/{id}`` reads the id into a link; the record keeps that id (the template used to take the
    column away from it, and the records were numbered anew without a word)."""
    rows = [{"id": "TK-50", "title": "Queue backlog after a broker restart", "org": "acme",
             "body": "The broker restarted and consumers fell behind for an hour."},
            {"id": "TK-3", "title": "Expired certificate on the API gateway", "org": "acme",
             "body": "The gateway served an expired certificate until it was renewed by hand."}]
    source = jsonl(tmp_path / "tickets.jsonl", rows)
    result = CliRunner().invoke(app, ["import", str(source), "--format", "jsonl", "--into", str(target), "--json",
                                      "--id-prefix", "TK", "--set", "source_url=https://tickets.example/{id}"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(r["id"] for r in report["accepted"]) == ["TK-0003", "TK-0050"]
    record = yaml.safe_load((target / "incidents" / "TK-0050.yaml").read_text(encoding="utf-8"))
    assert record["sources"][0]["url"] == "https://tickets.example/TK-50"
    assert report["unread_columns"] == []


def test_a_status_page_history_is_not_rejected_for_its_template_sentences(tmp_path: Path, target: Path) -> None:
    """Records that share a status page's template sentences and differ in the sentence naming their cause are
    different incidents; a record filed twice (reworded a little, or copied three times) is still a duplicate."""
    causes = ["an expired TLS certificate on the edge proxies", "a full disk on the primary database",
              "a bad DNS record pushed by automation", "a memory leak in the session service",
              "a misconfigured load balancer health check", "a saturated message queue after a deploy",
              "a failed storage controller in one zone", "a runaway cron job exhausting connections",
              "a stale feature flag in the pricing service", "an exhausted connection pool on the cache tier"]
    template = ("We are investigating reports of elevated errors. The root cause was {cause}. "
                "A fix has been implemented and we are monitoring the results. This incident has been resolved.")
    rows = [{"title": "Elevated API errors", "summary": template.format(cause=cause), "org": "acme",
             "url": f"https://status.example/incidents/{n}"} for n, cause in enumerate(causes)]
    copied = {"title": "Checkout latency", "summary": "Checkout pages took ten seconds to load for all shoppers.",
              "org": "acme"}
    rows += [dict(copied, url=f"https://status.example/copy/{n}") for n in range(3)]
    rows.append({**rows[0], "url": "https://status.example/incidents/again",
                 "summary": rows[0]["summary"].replace("The root cause was", "Root cause:")})
    source = jsonl(tmp_path / "status.jsonl", rows)
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, id_prefix="SP", dry_run=True))
    accepted = [a.location for a in report.accepted]
    assert len(accepted) == len(causes) + 1, [r.reasons for r in report.rejected]
    rejected = {r.location: r.duplicate_of for r in report.rejected}
    assert len(rejected) == 3 and all(of for of in rejected.values())  # two copies, and the reworded record
    assert rejected[f"status.jsonl:{len(rows)}"] == report.accepted[0].id


@pytest.mark.parametrize(("name", "content", "fmt"), [
    ("empty.jsonl", "\n\n", "jsonl"),
    ("header.csv", "title,org,url\n", "csv"),
    ("tickets.csv", "title,org,url\nDisk full,acme,https://t.example/1\n", "markdown"),
    ("list.json", "[]", "json"),
])
def test_a_file_with_no_records_is_an_error_not_an_empty_import(tmp_path: Path, target: Path, name: str, content: str,
                                                                 fmt: str) -> None:
    source = tmp_path / name
    source.write_text(content, encoding="utf-8")
    before = files(target)
    result = CliRunner().invoke(app, ["import", str(source), "--format", fmt, "--into", str(target)])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert f"{name}: no records found as {fmt}" in said and "--format" in said, said
    assert files(target) == before


def test_a_mapping_that_names_no_column_of_the_file_is_refused_before_any_record(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "tickets.csv"
    source.write_text("id,created,title,description\nOPS-1,2024-05-01,Disk full,The log disk filled up.\n", encoding="utf-8")
    before = files(target)
    runner = CliRunner()
    for option, said in ((["--map", "title=summary_text"], "--map title=summary_text: no record has 'summary_text'"),
                         (["--set", "source_url=https://t.example/{ticket}"],
                          "--set source_url=https://t.example/{ticket}: no record has 'ticket'")):
        result = runner.invoke(app, ["import", str(source), "--format", "csv", "--into", str(target), "--set", "org=acme",
                                     *option])
        message = " ".join(result.output.split())
        assert result.exit_code != 0 and said in message, message
        assert "the records' keys are: id, created, title, description" in message
    assert files(target) == before
    typo = runner.invoke(app, ["import", str(source), "--format", "csv", "--into", str(target), "--set", "org=acme",
                               "--set", "source_url=https://t.example/x", "--map", "date=creatd"])
    assert typo.exit_code != 0 and "no record has 'creatd' (did you mean 'created'?)" in " ".join(typo.output.split())
    # an optional field no record of this export fills (exporters drop empty keys) is said per record, not refused
    optional = run_import(source, target, ImportOptions(format=ImportFormat.csv, dry_run=True,
                                                        sets=["org=acme", "source_url=https://t.example/{id}"],
                                                        maps=["mitigation=resolution_notes"]))
    assert len(optional.accepted) == 1 and "mitigation: nothing at 'resolution_notes'" in optional.accepted[0].warnings
    # a key some records have and others lack is a value those lack, not a typo: each of those says so
    rows = [{"title": "Disk full", "org": "acme", "url": "https://t.example/1", "team": "storage"},
            {"title": "Cache cold", "org": "acme", "url": "https://t.example/2"}]
    report = run_import(jsonl(tmp_path / "t.jsonl", rows), target,
                        ImportOptions(format=ImportFormat.jsonl, maps=["tags=team"], dry_run=True))
    assert len(report.accepted) == 2 and report.accepted[1].warnings == ["tags: nothing at 'team'"]


def test_a_lone_description_is_the_body_and_the_summary_its_first_sentences(tmp_path: Path, target: Path) -> None:
    from incidentlib.importing.pipeline import SUMMARY_CHARS

    long_text = "The primary database ran out of disk after a runaway audit log. " + "Filler words for length. " * 400
    rows = [{"title": "Database disk full", "org": "acme", "url": "https://t.example/9", "description": long_text}]
    report = run_import(jsonl(tmp_path / "d.jsonl", rows), target, ImportOptions(format=ImportFormat.jsonl))
    record = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert record["body"]["en"] == long_text.strip()
    assert record["summary"]["en"] == "The primary database ran out of disk after a runaway audit log."
    assert len(record["summary"]["en"]) <= SUMMARY_CHARS


def test_an_incident_filed_four_times_with_a_new_status_line_each_time_is_still_a_duplicate(
        tmp_path: Path, target: Path) -> None:
    """The sentences four copies share are what they have in common, not a template: below the template threshold
    (TEMPLATE_MIN_RECORDS) they stay in the comparison, and the copies are caught."""
    text = ("Checkout requests failed for shoppers in the EU region. The payment gateway returned timeouts after a "
            "certificate rotation. Engineers rolled the certificate back. ")
    rows = [{"title": "Checkout failures in EU", "summary": text + f"Status: {status}.", "org": "acme",
             "url": f"https://status.example/eu/{n}"} for n, status in enumerate(("investigating", "identified",
                                                                                   "monitoring", "resolved"))]
    report = run_import(jsonl(tmp_path / "copies.jsonl", rows), target,
                        ImportOptions(format=ImportFormat.jsonl, id_prefix="SP", dry_run=True))
    assert len(report.accepted) == 1 and len(report.rejected) == 3
    assert {r.duplicate_of for r in report.rejected} == {report.accepted[0].id}


def test_a_text_column_quoted_by_a_text_template_is_not_also_the_summary(tmp_path: Path, target: Path) -> None:
    description = "The nightly batch overran into business hours. " + "It kept the warehouse locked. " * 30
    rows = [{"title": "Batch overran", "org": "acme", "url": "https://t.example/b1", "description": description}]
    report = run_import(jsonl(tmp_path / "b.jsonl", rows), target,
                        ImportOptions(format=ImportFormat.jsonl, sets=["body={description} (imported from Jira)"]))
    record = yaml.safe_load((target / "incidents" / f"{report.accepted[0].id}.yaml").read_text(encoding="utf-8"))
    assert record["body"]["en"].endswith("(imported from Jira)")
    assert record["summary"]["en"] == "The nightly batch overran into business hours."


def test_a_wrapper_with_an_empty_list_of_incidents_holds_no_records(tmp_path: Path, target: Path) -> None:
    source = tmp_path / "status.json"
    source.write_text(json.dumps({"page": {"id": "p1", "name": "Acme"}, "incidents": []}), encoding="utf-8")
    with pytest.raises(ImportFailed, match=r"status\.json: no records found as json"):
        run_import(source, target, ImportOptions(format=ImportFormat.json, maps=["source_url=shortlink"]))
