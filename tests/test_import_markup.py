"""HTML in an export's text fields is stored as the text its reader sees; text that only looks like it is left as
written (incidentlib/importing/markup.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from incidentlib.importing import ImportFormat, ImportOptions, run_import
from incidentlib.importing.jira_markup import jira_text, looks_like_jira
from incidentlib.importing.markup import as_text, html_text, looks_like_html
from incidentlib.loader import check_library

STATUS_PAGE = (
    '<div class="card-body">\n<p><strong>Summary of Impact:</strong> Between 19:07 and 22:20 UTC, requests to the '
    'control plane failed &amp; timed out.<br/><br/><strong>Root Cause:</strong> A deployment sent every call to one '
    'database partition.</p><ul>\n<li>Add auto-scaling</li>\n<li>Review the rollout</li>\n</ul>'
    '<pre>kubelet[812]: probe failed\n  exit 137</pre><script>track()</script><!-- internal note --></div>')


JIRA = """h2. Impact
Training stalled on *512 GPUs* for 3 hours; see [the runbook|https://wiki.example/runbooks/nccl] and [~kim].

h2. Logs
{code:java}
Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1200, OpType=ALLREDUCE)
{code}
{color:red}Do not restart the job{color} until {{gpu-17}} is drained.
!nccl-graph.png|thumbnail!
||node||Xid||
|gpu-17|79|
# drain the node
# rerun the job
----
bq. Lesson: alert on link flaps."""


def test_jira_wiki_markup_is_read_as_the_issue_shows_it() -> None:
    assert looks_like_jira(JIRA) and not looks_like_html(JIRA)
    assert as_text(JIRA) == jira_text(JIRA) == (
        "## Impact\nTraining stalled on 512 GPUs for 3 hours; see the runbook and kim.\n\n"
        "## Logs\n\nWatchdog caught collective operation timeout: WorkNCCL(SeqNum=1200, OpType=ALLREDUCE)\n\n"
        "Do not restart the job until gpu-17 is drained.\n\n"
        "node Xid\ngpu-17 79\n- drain the node\n- rerun the job\n\nLesson: alert on link flaps.")


@pytest.mark.parametrize(("text", "jira"), [
    ("h2. Impact\nNodes lost their links.", True),  # a heading, with no brace or bar anywhere
    ("Before it\n  H3.\tLogs", True),  # indented, upper case, after a tab
    ("the h2. heading is written inline", False),  # not at a line's start
    ("h7. is no heading level", False),
    ("sh1. a word ending so", False),
    ("h2.\n", False),  # nothing after the marker
])
def test_a_heading_line_alone_makes_a_text_jira_markup(text: str, jira: bool) -> None:
    assert looks_like_jira(text) is jira


@pytest.mark.parametrize("text", [
    "CUDA_VISIBLE_DEVICES=0,1 and a *star",
    "# A Markdown heading\n\nthe text under it",
    "[1, 2] | grep x and array[i|j]",
    "Use {}.format() or {name} in templates",
    "Fix it! Now! The image.png! was fine",
])
def test_text_that_is_not_jira_markup_is_left_as_written(text: str) -> None:
    assert not looks_like_jira(text)
    assert as_text(text) == text


@pytest.mark.parametrize("text", [
    "kill <pid> then retry",  # a log line's placeholder
    "Map<String, List<Integer>> was null",  # a type
    "latency < 5 ms and > 2 ms",
    "NCCL <none> error</none>",  # a closing tag of no HTML element
    "the <b> key was stuck",  # an opening tag alone
])
def test_text_that_only_looks_like_markup_is_left_as_written(text: str) -> None:
    assert not looks_like_html(text)
    assert as_text(text) == text


def test_html_is_read_as_paragraphs_lines_and_words() -> None:
    assert looks_like_html(STATUS_PAGE)
    assert html_text(STATUS_PAGE) == (
        "Summary of Impact: Between 19:07 and 22:20 UTC, requests to the control plane failed & timed out.\n\n"
        "Root Cause: A deployment sent every call to one database partition.\n\n"
        "Add auto-scaling\nReview the rollout\n\n"
        "kubelet[812]: probe failed\nexit 137")
    assert html_text("Line one<br>Line two") == "Line one\nLine two"
    assert html_text("<table><tr><th>node</th><th>Xid</th></tr><tr><td>gpu-7</td><td>79</td></tr></table>") == (
        "node Xid\ngpu-7 79")
    # a malformed marked section, which the standard parser stops at with an assertion, is read as text
    assert html_text("<p>a</p><![x y]]><p>b</p>") == "a\n\n<![x y]]>\n\nb"
    # inside HTML, a tag that names no element is kept: the log line's <pid> is part of the text
    assert html_text("<p>kill <pid> failed</p><p>then&nbsp;stop</p>") == "kill <pid> failed\n\nthen stop"


def test_an_export_with_html_descriptions_is_stored_as_text(tmp_path: Path) -> None:
    source = tmp_path / "tickets.csv"
    with source.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["number", "short_description", "description", "company"])
        writer.writerow(["INC1", "<b>Control plane</b> errors", STATUS_PAGE, "Acme"])
        writer.writerow(["INC2", "Pods restarting", "Back-off restarting failed container <pid> in pod web-1", "Acme"])
    options = ImportOptions(format=ImportFormat.csv, maps=["title=short_description", "body=description",
                                                         "org=company"],
                            sets=["source_url=https://tickets.example/{number}"])
    report = run_import(source, tmp_path / "lib", options)
    assert len(report.accepted) == 2, report
    data, problems = check_library(tmp_path / "lib")
    assert not problems and data is not None
    first, second = (data.incidents[row.id] for row in report.accepted)
    assert first.title.get("en") == "Control plane errors"
    assert first.body.get("en").startswith("Summary of Impact: Between 19:07 and 22:20 UTC, requests to the control plane "
                                       "failed & timed out.\n\nRoot Cause:")
    assert first.summary.get("en").startswith("Summary of Impact:")  # derived from the text, not from the markup
    stored = json.dumps(first.model_dump(mode="json"))
    for markup in ("<div", "<p>", "<br", "&amp;", "track()", "internal note", "card-body"):
        assert markup not in stored, markup
    assert second.body.get("en") == "Back-off restarting failed container <pid> in pod web-1"
