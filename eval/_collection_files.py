"""What every collection converter of ``eval/`` writes: ``collection.jsonl`` and ``labels.jsonl`` in one folder (each
written to a temporary file first, then renamed), and the line that counts them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_collection(out: Path, records: Sequence[dict[str, Any]], labels: Sequence[dict[str, Any]]) -> str:
    """Write both files into ``out`` (made if missing); returns "N records, M labelled; labels: {label: count, …}"."""
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("collection.jsonl", records), ("labels.jsonl", labels)):
        temporary = out / f".{name}.tmp"
        temporary.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        temporary.replace(out / name)
    counts = Counter(label for row in labels for label in row["labels"])
    return f"{len(records)} records, {len(labels)} labelled; labels: {dict(counts.most_common())}"
