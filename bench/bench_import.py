"""Import throughput (records/s, before any embedding) of ``incidentlib import`` on a synthetic JSONL archive.

    python bench/bench_import.py --records 3000 10000

The archive is made from the bundled library's incidents: record ``n`` is incident
``n mod N`` with its title, summary and body, a distinct source URL, and ``NOTE_WORDS``
words drawn at random from the library's text appended to the summary, so two records of
the same incident are not near-duplicates and each one goes the whole way (mapping, concept
recognition, the duplicate check against everything accepted so far, validation).  Every
tenth record repeats the previous record's text under a new URL, which the near-duplicate
check must reject.  The import is a dry run into a scratch copy of the
bundled library; ``--write`` times the whole import instead, with the writing of every record and the validation of
the library with them.  Each count is imported with each ``--workers`` setting (0: all in the
importing process; 1: the work that depends on a record alone done ahead by a worker process,
incidentlib/importing/ahead.py), side by side in one run.  Prints a Markdown table with wall-clock seconds and the
CPU seconds of the importing process and of its worker.
"""

from __future__ import annotations

import argparse
import json
import os
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
from incidentlib.importing.ahead import WORKERS_ENV  # noqa: E402

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


def run(count: int, scratch: Path, workers: int, write: bool = False) -> dict[str, float]:
    source = scratch / f"archive-{count}.jsonl"
    if not source.exists():
        archive(source, count)
    target = scratch / f"library-{count}-{workers}"
    if write and target.exists():  # a written import changed it: each run starts from the bundled library again
        shutil.rmtree(target)
    if not target.exists():  # a dry run leaves it as it was
        shutil.copytree(Library.open().root, target)
    os.environ[WORKERS_ENV] = str(workers)
    before = os.times()
    started = time.perf_counter()
    report = run_import(source, target, ImportOptions(format=ImportFormat.jsonl, dry_run=not write))
    seconds = time.perf_counter() - started
    after = os.times()
    if write and not report.written:
        raise SystemExit(f"the import of {count:,} records wrote nothing")
    cpu = (after.user + after.system) - (before.user + before.system)
    worker_cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    duplicates = sum(1 for r in report.rejected if r.duplicate_of)
    return {"records": count, "workers": workers, "seconds": seconds, "rate": count / seconds, "cpu": cpu,
            "worker_cpu": worker_cpu, "accepted": len(report.accepted), "near_duplicates": duplicates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1],
                        help="worker processes of each run (INCIDENTLIB_IMPORT_WORKERS), side by side")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each setting, in alternating order")
    parser.add_argument("--write", action="store_true",
                        help="time the whole import: also write the records and validate the library with them "
                             "(into a fresh copy of the bundled library each run)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="incidentlib-bench-import-") as folder:
        for count in args.records:
            for round_number in range(args.rounds):
                order = args.workers if round_number % 2 == 0 else list(reversed(args.workers))
                rows.extend(run(count, Path(folder), workers, args.write) for workers in order)
    print("| records | workers | seconds | records/s | CPU seconds, importing process | CPU seconds, worker "
          "| accepted | rejected as near-duplicates |\n|---|---|---|---|---|---|---|---|")
    for row in sorted(rows, key=lambda row: (row["records"], row["workers"])):
        print(f"| {row['records']:,} | {row['workers']} | {row['seconds']:.1f} | {row['rate']:.0f} | {row['cpu']:.1f} "
              f"| {row['worker_cpu']:.1f} | {row['accepted']:,} | {row['near_duplicates']:,} |")


if __name__ == "__main__":
    main()
