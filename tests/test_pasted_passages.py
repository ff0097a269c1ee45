"""Pasted text is cut into the passages a record of the same text is embedded in: a title or heading line is read with
the paragraph after it, as a record's title is with its summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fakes import HashEmbedder
from test_similarity import APOLOGY, NEXT, import_collection

from incidentlib import Library
from incidentlib.loader import load_library
from incidentlib.models import Incident
from incidentlib.search.chunks import MAX_CHUNK_CHARS, incident_chunks, is_heading, pasted_passages
from incidentlib.search.engine import SearchConfig
from incidentlib.tagging.tagger import incident_text

DRAFT = {
    "id": "PG-0001", "status": "draft", "org": "cloudflare", "date": "2019-07-02",
    "title": {"en": "Cloudflare outage (2019-07-02)"},
    "summary": {"en": "A WAF rule with a backtracking regular expression used every CPU."},
    "body": {"en": "A WAF rule with a backtracking regular expression used every CPU.\nTraffic was dropped worldwide.\n\n"
                   "The rule was disabled globally and traffic recovered."},
    "sources": [{"url": "https://example.com/waf", "title": "WAF outage"}],
}


@pytest.mark.parametrize("line, heading", [
    ("Cloudflare outage (2019-07-02)", True),  # a title: names what follows
    ("Root cause", True),
    ("Timeline:", True),
    ("The disk filled.", False),
    ('He wrote "done."', False),  # a sentence closed inside a quote still ends
    ("**Resolved.**", False),
    ("Two lines\nof text", False),  # a paragraph, not a line
    ("", False),
])
def test_a_heading_is_one_line_that_ends_no_sentence(line: str, heading: bool) -> None:
    assert is_heading(line) is heading


def test_a_records_pasted_text_gives_its_own_passages(library: Library) -> None:
    record = Incident.model_validate(DRAFT)
    pasted = incident_text(record, "en")
    assert pasted.startswith("Cloudflare outage (2019-07-02)\n\n")  # the title alone on its first line
    passages = [chunk.text for chunk in incident_chunks(record, library.vocab) if chunk.kind in ("title", "body")]
    assert pasted_passages(pasted) == passages
    assert passages[0] == "Cloudflare outage (2019-07-02). A WAF rule with a backtracking regular expression used every CPU."


def test_headings_join_what_follows_and_boilerplate_is_left_out() -> None:
    text = "Root cause\n\nThe disk filled.\n\nTimeline:\n\n- 13:42 rule deployed\n- 14:02 rule disabled\n\nFollow-ups"
    assert pasted_passages(text) == ["Root cause. The disk filled.", "Timeline: - 13:42 rule deployed - 14:02 rule disabled",
                                     "Follow-ups"]  # a last heading, with nothing after it, stays a passage
    # a heading repeated as the start of its paragraph is said once, as a title repeated by its summary
    assert pasted_passages("Disk full\n\nDisk full on the primary.") == ["Disk full on the primary."]
    # a paragraph removed as boilerplate takes nothing with it: the heading joins the next one that is kept
    strip = lambda paragraph: "" if paragraph == APOLOGY else paragraph  # noqa: E731
    assert pasted_passages(f"Summary\n\n{APOLOGY}\n\nThe disk filled.", strip) == ["Summary. The disk filled."]
    assert pasted_passages(f"{APOLOGY}\n\n", strip) == [APOLOGY]  # nothing kept: the text itself
    long = " ".join(["The disk filled again."] * (MAX_CHUNK_CHARS // 10))
    assert len(pasted_passages(f"Storage\n\n{long}")) > 1  # a long paragraph is split, as a record's body is


def test_a_records_text_pasted_is_embedded_as_its_kept_passages(tmp_path: Path) -> None:
    """The dense evidence of a record's text pasted is the record's own: the same passage vectors."""
    root, _ = import_collection(tmp_path)
    library = Library(load_library(root), SearchConfig(cache_dir=tmp_path / "cache"), embedder=HashEmbedder())
    library.build_index()
    similarity = library._search_service.similarity
    titled = 0
    for record in library.incidents():
        text = incident_text(record)
        assert APOLOGY in text and NEXT in text  # the template is there, and left out on both sides
        titled += is_heading(text.split("\n\n")[0])
        np.testing.assert_allclose(similarity.text_passages(text), similarity.incident_passages(record.id), atol=1e-6)
    assert titled == 5  # five of the twelve open with a title cut at a comma or a semicolon
