"""Memory and time of loading a library's records from the start snapshot, three ways, side by side.

    python bench/bench_records_memory.py --copies 100          # 100 × the bundled records; prints Markdown

A start snapshot of the bundled records copied ``--copies`` times (new ids, same texts) is written with
``start_snapshot.save``.  Then, each in a fresh process, the same file's records are validated

- **one array**: all records in one ``validate_json`` call, as the snapshot's format 1 stored and loaded them;
- **parts**: one call per part of ``RECORDS_PER_PART`` records, nothing shared;
- **parts, shared** (this version): ``start_snapshot.load`` itself, each part's fields sets shared as it is
  made (``incidentlib.field_sets``).

Reported: the process's resident memory (VmRSS) added by the load, per record, and the load's wall time
per record; ``--rounds`` rounds alternate the three, medians reported.  The cyclic collector is paused as
the loader pauses it.  The machine is shared: read the columns against each other, not as absolute numbers.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODES = ("one array", "parts", "parts, shared")
KEY = "bench-records-memory"


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def write_snapshot(cache: Path, copies: int) -> int:
    from incidentlib import start_snapshot
    from incidentlib.loader import load_library
    from incidentlib.paths import bundled_data_dir

    data = load_library(bundled_data_dir())
    records = list(data.incidents.values())
    incidents = {}
    for copy in range(copies):
        for number, record in enumerate(records):
            new_id = f"IL-{copy * len(records) + number:06d}"
            incidents[new_id] = record.model_copy(update={"id": new_id})
    if not start_snapshot.save(cache, KEY, list(data.vocab), incidents, {i: [] for i in incidents}):
        raise SystemExit("could not write the snapshot")
    return len(incidents)


def load_once(cache: Path, mode: str) -> dict[str, float]:
    """In this (fresh) process: load the snapshot's records the way ``mode`` names; RSS added and seconds."""
    from pydantic import TypeAdapter

    from incidentlib import start_snapshot
    from incidentlib.models import Incident

    gc.disable()
    records = TypeAdapter(list[Incident])
    if mode == "parts, shared":
        before = rss_mb()
        started = time.perf_counter()
        snapshot = start_snapshot.load(cache, KEY)
        seconds = time.perf_counter() - started
        assert snapshot is not None
        count = len(snapshot.incidents)
    else:
        blob = start_snapshot.snapshot_path(cache, KEY).read_bytes()
        end = blob.index(b"\n", len(b"incidentlib-start\n"))
        header = json.loads(blob[len(b"incidentlib-start\n"):end])
        offsets = [end + 1]
        for size in header["sizes"]:
            offsets.append(offsets[-1] + size)
        parts = [blob[start:stop] for start, stop in zip(offsets[1:-2], offsets[2:-1], strict=True)]
        inputs = [b"[" + b",".join(part[1:-1] for part in parts) + b"]"] if mode == "one array" else parts
        del blob
        before = rss_mb()
        started = time.perf_counter()
        loaded = [record for part in inputs for record in records.validate_json(part)]
        seconds = time.perf_counter() - started
        count = len(loaded)
    return {"records": count, "rss_mb": rss_mb() - before, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=100, help="copies of the bundled records")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(load_once(args.cache, args.child)))
        return

    from incidentlib import start_snapshot

    with tempfile.TemporaryDirectory(prefix="bench-records-") as folder:
        cache = Path(folder)
        count = write_snapshot(cache, args.copies)
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                out = subprocess.run([sys.executable, __file__, "--child", mode, "--cache", str(cache)],
                                     check=True, capture_output=True, text=True).stdout
                run = json.loads(out)
                assert run["records"] == count
                results[mode].append(run)

    def median(mode: str, field: str) -> float:
        return statistics.median(run[field] for run in results[mode])

    print(f"{count:,} records (the bundled ones × {args.copies}), parts of {start_snapshot.RECORDS_PER_PART:,}, "
          f"median of {args.rounds} rounds\n")
    print("| load | RSS added (MB) | KB a record | vs one array | time (s) | µs a record |")
    print("|---|---|---|---|---|---|")
    base = median("one array", "rss_mb")
    for mode in MODES:
        rss, seconds = median(mode, "rss_mb"), median(mode, "seconds")
        print(f"| {mode} | {rss:,.0f} | {rss * 1024 / count:.1f} | {rss / base:.2f}× | {seconds:.2f} | "
              f"{seconds * 1e6 / count:.0f} |")


if __name__ == "__main__":
    main()
