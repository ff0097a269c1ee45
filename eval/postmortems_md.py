"""Turn a Markdown list of postmortems grouped under category headings into an importable
collection and a separate labels file.

The input is a list such as ``README.md`` of github.com/danluu/post-mortems: ``## Heading``
sections whose entries read ``[Org](url). What happened.``  Someone other than this project
chose the headings, so they make an independent root-cause label for ``incidentlib eval
similar``.  The heading is written ONLY to the labels file, never into the records, so the
label cannot leak into what is ranked.

    python eval/postmortems_md.py README.md --out /tmp/pm      # -> collection.jsonl, labels.jsonl

Sections whose heading is not a root cause (``--skip``, default: uncategorized entries,
lists of other lists, analysis, contributors, the table of contents) are left out.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded from its path: its siblings
from _collection_files import write_collection

ENTRY = re.compile(r"^\[(?P<org>[^\]]+)\]\((?P<url>[^)\s]+)\)\.?\s*(?P<text>.*)$")
HEADING = re.compile(r"^##\s+(?P<name>.+?)\s*$")
DEFAULT_SKIP = ("uncategorized", "other lists of postmortems", "analysis", "contributors", "table of contents")
ID_PREFIX = "PM"


def convert(markdown: str, skip: tuple[str, ...] = DEFAULT_SKIP) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Records (org, summary, source_url, id) and labels (id, labels) from the Markdown list."""
    records: list[dict[str, object]] = []
    labels: list[dict[str, object]] = []
    section: str | None = None
    current: dict[str, object] | None = None
    for line in markdown.splitlines():
        heading = HEADING.match(line)
        if heading:
            section = heading.group("name")
            current = None
            continue
        if section is None or section.lower() in skip:
            continue
        entry = ENTRY.match(line.strip())
        if entry:
            record_id = f"{ID_PREFIX}-{len(records) + 1:04d}"
            current = {"id": record_id, "org": entry.group("org"), "summary": entry.group("text").strip(),
                       "source_url": entry.group("url")}
            records.append(current)
            labels.append({"id": record_id, "labels": [section]})
        elif current is not None and line.strip():  # a wrapped continuation line
            current["summary"] = f"{current['summary']} {line.strip()}".strip()
    kept = [(r, lab) for r, lab in zip(records, labels, strict=True) if r["summary"]]
    return [r for r, _ in kept], [lab for _, lab in kept]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("markdown", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="folder for collection.jsonl and labels.jsonl")
    args = parser.parse_args()
    records, labels = convert(args.markdown.read_text(encoding="utf-8"))
    print(write_collection(args.out, records, labels))


if __name__ == "__main__":
    main()
