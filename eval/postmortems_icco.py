"""Turn a folder of Markdown postmortems with YAML front matter into an importable collection
and a separate labels file.

The input is the ``data/`` folder of github.com/icco/postmortems: one ``<uuid>.md`` per
postmortem, a YAML front matter block (``uuid``, ``url``, ``title``, ``company``, ``product``,
``start_time``, ``summary``, ``categories``, ``keywords`` …) between ``---`` lines, then the
write-up as Markdown.  Someone other than this project assigned the ``categories``
(config-change, cloud, automation, security, cascading-failure, hardware, time), so they make
an independent label for ``incidentlib eval similar``.

The categories are written ONLY to the labels file, and the ``keywords`` (chosen with the
categories, often naming the cause) are dropped altogether: neither can leak into what is
ranked.  A record keeps its title, organization (``company``), source URL, start date and its
text (the front matter's summary as ``summary``, the summary and the write-up as ``body``).

    python eval/postmortems_icco.py /tmp/icco/data --out /tmp/icco-pm    # -> collection.jsonl, labels.jsonl
    incidentlib import /tmp/icco-pm/collection.jsonl --format jsonl --into /tmp/iclib --id-prefix PI
    python eval/postmortems_icco.py --prune /tmp/icco-pm/labels.jsonl --library /tmp/iclib

The importer rejects a few entries of the list as duplicates of others (the same postmortem
under two URLs); ``--prune`` drops their labels, so the labels file names only imported records.

Records without categories are kept in the collection (they are what a user's archive would
hold) but get no label, so they are neither queries nor candidates of the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded from its path: its siblings
from _collection_files import write_collection

FRONT_MATTER = "---"
ID_PREFIX = "PI"
LABEL_FIELD = "categories"
NEVER_IN_RECORDS = ("categories", "keywords")  # labels, and terms chosen with them


class ConversionError(ValueError):
    """A postmortem file that cannot be read as front matter + body."""


def split_front_matter(text: str, name: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter (between the first two ``---`` lines) and the Markdown after it."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != FRONT_MATTER:
        raise ConversionError(f"{name}: does not start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == FRONT_MATTER)
    except StopIteration:
        raise ConversionError(f"{name}: front matter is not closed by a '---' line") from None
    meta = yaml.safe_load("\n".join(lines[1:end])) or {}
    if not isinstance(meta, dict):
        raise ConversionError(f"{name}: front matter is not a mapping")
    return meta, "\n".join(lines[end + 1 :]).strip()


def convert_one(meta: dict[str, Any], body: str, record_id: str) -> tuple[dict[str, object], list[str]]:
    """One record (never holding a label or keyword) and its labels."""
    summary = " ".join(str(meta.get("summary") or "").split())
    record: dict[str, object] = {"id": record_id, "org": str(meta.get("company") or "").strip(), "source_url": str(meta.get("url") or "")}
    if meta.get("title"):
        record["title"] = " ".join(str(meta["title"]).split())
    if summary:
        record["summary"] = summary
    text = "\n\n".join(t for t in (summary, body) if t)
    if text:
        record["body"] = text
    start = meta.get("start_time")
    if start:
        record["date"] = str(start)[:10]
    labels = sorted({str(c).strip() for c in meta.get(LABEL_FIELD) or [] if str(c).strip()})
    return record, labels


def convert(folder: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Records and labels for every ``*.md`` file of ``folder``, in file-name order."""
    records: list[dict[str, object]] = []
    labels: list[dict[str, object]] = []
    for number, path in enumerate(sorted(folder.glob("*.md")), 1):
        meta, body = split_front_matter(path.read_text(encoding="utf-8"), str(path))
        record, record_labels = convert_one(meta, body, f"{ID_PREFIX}-{number:04d}")
        records.append(record)
        if record_labels:
            labels.append({"id": record["id"], "labels": record_labels})
    return records, labels


def prune(labels_path: Path, library: Path) -> tuple[int, int]:
    """Keep only the label rows whose id is a record of ``library`` (its ``incidents/<id>.yaml``); (kept, dropped)."""
    present = {p.stem for p in (library / "incidents").glob("*.yaml")}
    rows = [json.loads(line) for line in labels_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [r for r in rows if r["id"] in present]
    temporary = labels_path.with_suffix(".tmp")
    temporary.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    temporary.replace(labels_path)
    return len(kept), len(rows) - len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, nargs="?", help="the data/ folder of postmortem .md files")
    parser.add_argument("--out", type=Path, help="folder for collection.jsonl and labels.jsonl")
    parser.add_argument("--prune", type=Path, help="a labels.jsonl to reduce to the records of --library")
    parser.add_argument("--library", type=Path, help="the library the collection was imported into")
    args = parser.parse_args()
    if args.prune:
        if not args.library:
            parser.error("--prune needs --library")
        kept, dropped = prune(args.prune, args.library)
        print(f"{kept} labelled records kept, {dropped} not in {args.library} dropped")
        return
    if not args.folder or not args.out:
        parser.error("give the data folder and --out (or --prune with --library)")
    records, labels = convert(args.folder)
    print(write_collection(args.out, records, labels))


if __name__ == "__main__":
    main()
