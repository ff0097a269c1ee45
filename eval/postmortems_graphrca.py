"""Turn the real-incident folder of the GraphRCA study into an importable collection and a separate labels file.

The input is ``research/data/real_incidents`` of github.com/chxmq/graph-rca: one ``incident_NNN/`` folder per public
postmortem, holding ``postmortem.md`` (a short write-up: a heading, then the description and root cause as the
study's authors summarised them), ``metadata.json`` (company, date, severity, a category) and ``ground_truth.json``
(the source URL, a root-cause sentence and a ``category``: Infrastructure, Database, Software, Network, Security,
Configuration, Memory, Cloud, CI-CD).  The study's authors assigned the categories, so they are an independent label
for ``incidentlib eval similar``.

What may leak the label is kept out of the records: the ``category`` goes to the labels file only, the lines of the
write-up that state a category, severity or source (``**Category:** Database``, ``Category: Software/Script``) are
dropped, and neither the annotated root-cause sentence of ``ground_truth.json`` nor the synthetic ``logs*.txt`` (made
by a language model for the study) are read.  A record keeps the write-up's heading as its title, the rest as its
body, the company as its organization, the source URL and an exact date when there is one.

    python eval/postmortems_graphrca.py /tmp/graph-rca/research/data/real_incidents --out /tmp/pg
    incidentlib import /tmp/pg/collection.jsonl --format jsonl --into /tmp/pglib --id-prefix PG
    python eval/postmortems_icco.py --prune /tmp/pg/labels.jsonl --library /tmp/pglib
    incidentlib tag --data /tmp/pglib
    incidentlib eval similar --labels /tmp/pg/labels.jsonl --data /tmp/pglib --k 5

Many of the write-ups restate entries of the danluu list (eval/postmortems_md.py) under other labels; the importer
rejects an entry whose source URL another entry already has, and ``--prune`` drops its label.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded from its path: its siblings
from _collection_files import write_collection

ID_PREFIX = "PG"
LABEL_FIELD = "category"  # of ground_truth.json (metadata.json's is sometimes a longer form: "Configuration/Scaling")
#: Lines of a write-up that state what the labels file holds, or metadata kept elsewhere: never in the record's text.
STATED = re.compile(r"^\s*(?:[*_]{0,2})\s*(?:category|categories|severity|source)\s*(?:[*_]{0,2})\s*:", re.IGNORECASE)
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ConversionError(ValueError):
    """An incident folder that cannot be read."""


def _json(path: Path) -> dict[str, object]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ConversionError(f"{path}: {error}") from None
    if not isinstance(value, dict):
        raise ConversionError(f"{path}: not a JSON object")
    return value


def convert_one(folder: Path, record_id: str) -> tuple[dict[str, object], list[str]]:
    """One record (never holding its label) and its labels."""
    meta, truth = _json(folder / "metadata.json"), _json(folder / "ground_truth.json")
    try:
        lines = (folder / "postmortem.md").read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ConversionError(f"{folder / 'postmortem.md'}: {error}") from None
    title = ""
    kept: list[str] = []
    for line in lines:
        if not title and line.startswith("# "):
            title = line[2:].strip()
        elif not STATED.match(line):
            kept.append(line.rstrip())
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    record: dict[str, object] = {"id": record_id, "org": str(meta.get("company") or "").strip(),
                                 "source_url": str(truth.get("source") or "").strip()}
    if title:
        record["title"] = title
    if body:
        record["body"] = body
    date = str(meta.get("date") or "")
    if ISO_DATE.match(date):
        record["date"] = date
    label = str(truth.get(LABEL_FIELD) or "").strip()
    return record, [label] if label else []


def convert(root: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Records and labels for every ``incident_*`` folder of ``root``, in name order."""
    records: list[dict[str, object]] = []
    labels: list[dict[str, object]] = []
    folders = sorted(p for p in root.glob("incident_*") if p.is_dir())
    if not folders:
        raise ConversionError(f"{root}: no incident_* folders")
    for number, folder in enumerate(folders, 1):
        record, record_labels = convert_one(folder, f"{ID_PREFIX}-{number:04d}")
        records.append(record)
        if record_labels:
            labels.append({"id": record["id"], "labels": record_labels})
    return records, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the real_incidents folder (incident_NNN/ subfolders)")
    parser.add_argument("--out", type=Path, required=True, help="folder for collection.jsonl and labels.jsonl")
    args = parser.parse_args()
    try:
        records, labels = convert(args.folder)
    except ConversionError as error:
        parser.exit(2, f"error: {error}\n")
    print(write_collection(args.out, records, labels))


if __name__ == "__main__":
    main()
