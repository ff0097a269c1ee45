"""Import throughput (records/s, before any embedding) of ``incidentlib import`` on a synthetic JSONL archive.

    python bench/bench_import.py --records 3000 10000

The archive is made from the bundled library's incidents: record ``n`` is incident
``n mod N`` with its title, summary and body, a distinct source URL, and ``NOTE_WORDS``
words drawn at random from the library's text appended to the summary, so two records of
the same incident are not near-duplicates and each one goes the whole way (mapping, concept
recognition, the duplicate check against everything accepted so far, validation).  Every
tenth record repeats the previous record's text under a new URL, which the near-duplicate
check must reject.  The import is a dry run into a scratch copy of the
bundled library (writing and the final whole-library validation are not timed: they do not
grow with the record count per record).  Prints a Markdown table with wall-clock and CPU
seconds of the process (on a shared machine the CPU figure is the steadier one).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.importing import ImportFormat, ImportOptions, run_import  # noqa: E402

#: One record in this many repeats an earlier one's text (a near-duplicate the import must reject).
DUPLICATE_EVERY = 10
#: Random words added to each summary: enough that two records of one incident share under 60 % of
#: their title and summary tokens (the near-duplicate threshold).
NOTE_WORDS = 80


def archive(path: Path, count: int, seed: int = 0) -> None:
    incidents = Library.open().incidents()
    pool = sorted({w for i in incidents for w in re.findall(r"[A-Za-z]{4,}", i.summary.en)})
    rng = random.Random(seed)
    previous: dict[str, object] = {}
    with path.open("w", encoding="utf-8") as handle:
        for n in range(count):
            source = incidents[n % len(incidents)]
            record: dict[str, object] = {
                "title": f"Ticket {n}: {source.title.en}",
                "summary": f"{source.summary.en} Notes: {' '.join(rng.choices(pool, k=NOTE_WORDS))}.",
                "body": source.body.en or "",
                "org": source.org,
                "date": source.date,
            }
            if n % DUPLICATE_EVERY == DUPLICATE_EVERY - 1:
                record = dict(previous)  # the previous record again, under another URL
            previous = record
            handle.write(json.dumps({**record, "url": f"https://tickets.example/{n}"}, ensure_ascii=False) + "\n")


def run(count: int, scratch: Path) -> dict[str, float]:
    source = scratch / f"archive-{count}.jsonl"
    archive(source, count)
    target = scratch / f"library-{count}"
    shutil.copytree(Library.open().root, target)
    started, cpu_started = time.perf_counter(), time.process_time()
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, dry_run=True))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    duplicates = sum(1 for r in report.rejected if r.duplicate_of)
    return {"records": count, "seconds": seconds, "rate": count / seconds, "cpu": cpu, "cpu_rate": count / cpu,
            "accepted": len(report.accepted), "near_duplicates": duplicates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="incidentlib-bench-import-") as folder:
        rows = [run(count, Path(folder)) for count in args.records]
    print("| records | seconds | records/s | CPU seconds | records per CPU second | accepted | rejected as near-duplicates |\n"
          "|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['records']:,} | {row['seconds']:.1f} | {row['rate']:.0f} | {row['cpu']:.1f} | {row['cpu_rate']:.0f} "
              f"| {row['accepted']:,} | {row['near_duplicates']:,} |")


if __name__ == "__main__":
    main()
