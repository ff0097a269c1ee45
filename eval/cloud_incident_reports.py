"""Turn the labelled cloud incident reports of the "LLM for cloud incident data extraction" study into an importable
collection and a separate labels file.

The input is ``data/4_label_data`` of github.com/atlarge-research/llm-cloud-incident-extraction (CC0): one CSV per
provider, each row a public incident report as the provider's status page published it (``description``: Azure's
status-history HTML, or Google Cloud's list of status updates) and the study's annotations beside it.  The study's
authors assigned each report a root-cause category (``label_root_cause_category``: DEPLOY, CONFIG, OVERLOAD,
EXTERNAL, MAINTAIN, OTHERS; defined in their ``prompts/root_cause_instruction.txt``), so it is an independent label for
``incidentlib eval similar``.  Azure's and Google Cloud's files carry it; AWS's does not, so its rows are not read
unless another label is asked for (``--label service`` or ``symptom``: the service category, or the user-symptom
categories, which every file carries).

Only the report itself enters a record: the title, tracking id and date the page shows, and its text with the
markup removed (paragraphs kept).  No annotation column is read into a record: the labels, the extracted symptom and
root-cause sentences, times and locations stay out.  A row with no label (blank, or UNKNOWN) or no report text is
left out.  The
study's rows have no link of their own, so a record's source is its row in the study's file at the commit read.

    git clone https://github.com/atlarge-research/llm-cloud-incident-extraction /tmp/cir
    python eval/cloud_incident_reports.py /tmp/cir/data/4_label_data --commit $(git -C /tmp/cir rev-parse HEAD) --out /tmp/cr
    incidentlib import /tmp/cr/collection.jsonl --into /tmp/crlib --id-prefix CR
    incidentlib tag --data /tmp/crlib
    incidentlib eval similar --labels /tmp/cr/labels.jsonl --data /tmp/crlib --k 5
"""

from __future__ import annotations

import argparse
import ast
import csv
import html
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded from its path: its siblings
from _collection_files import write_collection

ID_PREFIX = "CR"
REPOSITORY = "https://github.com/atlarge-research/llm-cloud-incident-extraction"
#: The annotation column of each kind of label the study gives (several categories are written "ERROR, DELAY").
LABEL_COLUMNS = {"root_cause": "label_root_cause_category", "service": "label_service_category",
                 "symptom": "label_user_symptom_category"}
#: What the annotators wrote when they could not tell: no label.
NO_LABEL = {"", "UNKNOWN", "NONE", "NAN"}
#: The annotators' misspellings of a category, as the category (8 rows write UNVAIL for UNAVIL).
SPELLINGS = {"UNVAIL": "UNAVIL"}
PROVIDERS = {"azure": "Microsoft Azure", "gcp": "Google Cloud", "aws": "Amazon Web Services"}

# --- Azure's status-history HTML: a header (date, title, tracking id) and a card body --------------------------------
AZURE_DATE = re.compile(r'class="hide-text">\s*(\d{2})/(\d{2})/(\d{4})\s*<')
AZURE_TITLE = re.compile(r'class="[^"]*incident-history-title[^"]*">(.*?)</div>', re.DOTALL)
AZURE_TRACKING = re.compile(r"Tracking ID:\s*([A-Z0-9-]+)")
AZURE_BODY = re.compile(r'class="card-body">(.*)', re.DOTALL)
# --- Google Cloud's updates: a Python list of dicts printed with numpy arrays in it; only the strings are read --------
GCP_UPDATE = re.compile(r"'created':\s*'([^']*)'.*?'text':\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", re.DOTALL)
AWS_TIME = re.compile(r'<span class="yellowfg">\s*([^<]*?)\s*</span>')
# --- markup to text ---------------------------------------------------------------------------------------------------
LINE_BREAK = re.compile(r"<br\s*/?>|</li>", re.IGNORECASE)
BLOCK_EDGE = re.compile(r"</(?:p|div|ul|ol|h\d|table|tr)>|<(?:ul|ol)\b[^>]*>", re.IGNORECASE)
TAG = re.compile(r"<[^>]+>")


class ConversionError(ValueError):
    """A file or row that cannot be read."""


def markup_text(fragment: str) -> str:
    """The text of an HTML fragment: a block's edge or two line breaks is a paragraph break, a list item a line,
    spaces collapsed."""
    text = BLOCK_EDGE.sub("\n\n", LINE_BREAK.sub("\n", fragment))
    text = html.unescape(TAG.sub("", text)).replace("\r", "")
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _azure(description: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    if title := AZURE_TITLE.search(description):
        fields["title"] = markup_text(title.group(1))
    if tracking := AZURE_TRACKING.search(description):
        fields["tracking"] = tracking.group(1)
    if date := AZURE_DATE.search(description):
        month, day, year = date.groups()
        fields["date"] = f"{year}-{month}-{day}"
    body = AZURE_BODY.search(description)
    fields["body"] = markup_text(body.group(1) if body else description)
    return fields


def _gcp(description: str, headline: str) -> dict[str, str]:
    updates = []
    for created, literal in GCP_UPDATE.findall(description):
        try:
            updates.append((created, str(ast.literal_eval(literal))))
        except (ValueError, SyntaxError):
            raise ConversionError(f"an update's text is not a string literal: {literal[:60]!r}") from None
    if not updates:
        return {}
    updates.sort()  # oldest first, as the page tells the incident
    fields = {"body": "\n\n".join(text.replace("\r", "").strip() for _, text in updates)}
    if headline.strip():
        fields["title"] = headline.strip()
    if re.match(r"\d{4}-\d{2}-\d{2}", updates[0][0]):
        fields["date"] = updates[0][0][:10]
    return fields


def _aws(description: str, status: str) -> dict[str, str]:
    fields = {"body": markup_text(AWS_TIME.sub(r"\1 ", description))}
    title = re.sub(r"^\[[A-Z ]+\]\s*", "", status).strip()  # "[RESOLVED] Delayed CloudWatch Metrics"
    if title:
        fields["title"] = title
    return fields


def _rows(path: Path) -> list[dict[str, str]]:
    """The rows of one provider's file; a report is one cell, and Google Cloud's longest are tens of kilobytes, past
    the csv module's default cell limit, which is raised only while this file is read."""
    before = csv.field_size_limit(1 << 30)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    finally:
        csv.field_size_limit(before)


def labels_of(value: str) -> list[str]:
    """The categories of one annotation cell, upper case, misspellings read as meant, "unknown" left out."""
    found = []
    for part in re.split(r"[,;/]", value):
        label = SPELLINGS.get(part.strip().upper(), part.strip().upper())
        if label not in NO_LABEL and label not in found:
            found.append(label)
    return found


def convert(folder: Path, commit: str, label: str = "root_cause") -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Records and labels of every labelled row of ``{azure,gcp,aws}_label.csv`` in ``folder``, in that order."""
    column = LABEL_COLUMNS[label]
    records: list[dict[str, object]] = []
    labels: list[dict[str, object]] = []
    files = [(provider, folder / f"{provider}_label.csv") for provider in PROVIDERS]
    if not any(path.is_file() for _, path in files):
        raise ConversionError(f"{folder}: none of {', '.join(p.name for _, p in files)}")
    for provider, path in files:
        if not path.is_file():
            continue
        rows = _rows(path)
        if rows and column not in rows[0]:
            continue  # this provider's file has no such annotation
        for number, row in enumerate(rows, 1):
            row_labels = labels_of(row.get(column) or "")
            if not row_labels:
                continue
            description = row.get("description") or ""
            try:
                if provider == "azure":
                    fields = _azure(description)
                elif provider == "gcp":
                    fields = _gcp(description, row.get("external_description") or "")
                else:
                    fields = _aws(description, row.get("status") or "")
            except ConversionError as error:
                raise ConversionError(f"{path.name} row {number}: {error}") from None
            if not fields.get("body"):
                continue  # an annotated row whose report was not captured (one of Google Cloud's): nothing to compare
            record_id = f"{ID_PREFIX}-{len(records) + 1:04d}"
            record: dict[str, object] = {
                "id": record_id, "org": PROVIDERS[provider],
                "source_url": f"{REPOSITORY}/blob/{commit}/data/4_label_data/{path.name}#row-{number}",
                "title": fields.get("title") or f"{PROVIDERS[provider]} incident {fields.get('tracking', number)}",
                "body": fields["body"]}
            if "date" in fields:
                record["date"] = fields["date"]
            records.append(record)
            labels.append({"id": record_id, "labels": row_labels})
    if not records:
        raise ConversionError(f"{folder}: no row has both a report and a {column}")
    return records, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the study's data/4_label_data folder")
    parser.add_argument("--commit", required=True, help="the study repository's commit read (for the source links)")
    parser.add_argument("--label", choices=sorted(LABEL_COLUMNS), default="root_cause", help="which annotation labels")
    parser.add_argument("--out", type=Path, required=True, help="folder for collection.jsonl and labels.jsonl")
    args = parser.parse_args()
    if not re.fullmatch(r"[0-9a-f]{7,40}", args.commit):
        parser.exit(2, f"error: --commit: {args.commit!r} is not a git commit id\n")
    try:
        records, labels = convert(args.folder, args.commit, args.label)
    except ConversionError as error:
        parser.exit(2, f"error: {error}\n")
    print(write_collection(args.out, records, labels))


if __name__ == "__main__":
    main()
