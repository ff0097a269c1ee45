"""Memory and time of loading a library's records and chunks from the start snapshot, side by side.

    python bench/bench_records_memory.py --copies 100          # 100 × the bundled library; prints Markdown

A start snapshot of the bundled records and their chunks copied ``--copies`` times (new ids, the same
texts) is written with ``start_snapshot.save``, and the same records and chunks in the layout of the
snapshot's format 1 (all records in one JSON array; chunk columns holding the incident, kind and language
of every chunk as strings).  Then each of these runs in a fresh process, as the first thing it does after
reading its input bytes:

- records, **one array**: every record in one ``validate_json`` call, as format 1 loaded them;
- records, **parts**: one call per part of ``RECORDS_PER_PART`` records, nothing shared;
- records, **parts, shared** (this version): every record read from ``start_snapshot.RecordParts``, each part's
  fields sets shared as it is made (``incidentlib.field_sets``);
- **whole load, format 1**: the records as one array and the chunks from their string columns, as format 1's
  ``_decode`` did (reproduced here);
- **whole load, format 2** (this version): ``start_snapshot._decode`` on the snapshot's bytes.

Reported: the resident memory (VmRSS) the process holds after the step, over what it held before reading
the input (the input bytes dropped first: large single allocations, given back when freed), per record; and
the step's wall time per record; ``--rounds`` rounds alternate the steps, medians reported.  The cyclic
collector is paused as the loader pauses it.  The machine is shared: compare the rows with each other.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODES = ("records, one array", "records, parts", "records, parts, shared", "whole load, format 1",
         "whole load, format 2")
KEY = "bench-records-memory"
MAGIC = b"incidentlib-start\n"
FORMAT_ONE_COLUMNS = ("id", "incident", "kind", "lang", "text", "digest")


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def segment_offsets(blob: bytes) -> tuple[dict, list[int]]:
    """The header of a snapshot file's bytes and where each segment starts (and the last one ends)."""
    end = blob.index(b"\n", len(MAGIC))
    header = json.loads(blob[len(MAGIC):end])
    offsets = [end + 1]
    for size in header["sizes"]:
        offsets.append(offsets[-1] + size)
    return header, offsets


#: Segments of the chunk table after the incident parts (``start_snapshot._CHUNK_SEGMENTS``): names and counts (JSON),
#: kind codes, language codes, ids, digests, text ends, texts.
CHUNK_SEGMENTS = 7


def split_snapshot(blob: bytes) -> tuple[dict, bytes, list[bytes], bytes]:
    """The header, the concepts, the incident parts and the chunk table's JSON segment (the incident ids in order and
    their chunk counts) of a snapshot file's bytes."""
    header, offsets = segment_offsets(blob)
    first_chunk_segment = len(offsets) - 1 - CHUNK_SEGMENTS
    parts = [blob[start:stop] for start, stop in itertools.pairwise(offsets[1:first_chunk_segment + 1])]
    return header, blob[offsets[0]:offsets[1]], parts, blob[offsets[first_chunk_segment]:offsets[first_chunk_segment + 1]]


def write_inputs(folder: Path, copies: int) -> int:
    """The snapshot (format 2) in ``folder``, and the same content in format 1's layout beside it."""
    import orjson

    from incidentlib import start_snapshot
    from incidentlib.loader import load_library
    from incidentlib.paths import bundled_data_dir
    from incidentlib.search.chunks import Chunk, incident_chunks

    data = load_library(bundled_data_dir())
    records = list(data.incidents.values())
    originals = {record.id: incident_chunks(record, data.vocab) for record in records}
    incidents, chunks = {}, {}
    for copy in range(copies):
        for number, record in enumerate(records):
            new_id = f"IL-{copy * len(records) + number:06d}"
            incidents[new_id] = record.model_copy(update={"id": new_id})
            chunks[new_id] = [Chunk(id=new_id + c.id[len(record.id):], incident_id=new_id, kind=c.kind, lang=c.lang,
                                    text=c.text) for c in originals[record.id]]
    if not start_snapshot.save(folder, KEY, list(data.vocab), incidents, chunks):
        raise SystemExit("could not write the snapshot")
    header, concepts, parts, columns = split_snapshot(start_snapshot.snapshot_path(folder, KEY).read_bytes())
    (folder / "format1-concepts.json").write_bytes(concepts)
    (folder / "format1-incidents.json").write_bytes(b"[" + b",".join(part[1:-1] for part in parts) + b"]")
    decoded = orjson.loads(columns)
    flat = [chunk for incident_id in incidents for chunk in chunks[incident_id]]
    old = {"id": [c.id for c in flat], "incident": [c.incident_id for c in flat], "kind": [c.kind for c in flat],
           "lang": [c.lang for c in flat], "text": [c.text for c in flat], "digest": [c.digest for c in flat],
           "count": decoded["count"]}
    (folder / "format1-chunks.json").write_bytes(orjson.dumps(old))
    return len(incidents)


def format_one_chunks(blob: bytes, incidents: list) -> dict:
    """Format 1's chunk decoding: a string object for every field of every chunk."""
    import orjson

    from incidentlib.search.chunks import Chunk

    columns = orjson.loads(blob)
    flat = list(map(Chunk, *(columns[name] for name in FORMAT_ONE_COLUMNS[:-1])))
    for chunk, digest in zip(flat, columns["digest"], strict=True):
        object.__setattr__(chunk, "_digest", digest)
    chunks, start = {}, 0
    for incident, size in zip(incidents, columns["count"], strict=True):
        chunks[incident.id] = flat[start:start + size]
        start += size
    return chunks


def load_once(folder: Path, mode: str) -> dict[str, float]:
    """In this (fresh) process: the step ``mode`` names; RSS added and seconds.  The baseline is taken before the
    input is read and the input is dropped before the last reading, so what is left is what the step holds."""
    from pydantic import TypeAdapter

    from incidentlib import start_snapshot
    from incidentlib.models import Concept, Incident

    gc.disable()
    records = TypeAdapter(list[Incident])
    concepts_adapter = TypeAdapter(list[Concept])
    before = rss_mb()
    if mode in ("records, one array", "whole load, format 1"):
        inputs = [(folder / name).read_bytes() for name in ("format1-concepts.json", "format1-incidents.json",
                                                           "format1-chunks.json")]
        started = time.perf_counter()
        concepts_adapter.validate_json(inputs[0])
        loaded = records.validate_json(inputs[1])
        kept = format_one_chunks(inputs[2], loaded) if mode == "whole load, format 1" else None
    elif mode == "whole load, format 2":
        inputs = [start_snapshot.snapshot_path(folder, KEY).read_bytes()]
        started = time.perf_counter()
        kept = start_snapshot._decode(inputs[0], KEY)
        loaded = list(kept.incidents.values())
    elif mode == "records, parts, shared":  # every record read from a start's RecordParts, as the graph build does
        inputs = [start_snapshot.snapshot_path(folder, KEY).read_bytes()]
        _, offsets = segment_offsets(inputs[0])
        first_chunk_segment = len(offsets) - 1 - CHUNK_SEGMENTS
        ids = json.loads(inputs[0][offsets[first_chunk_segment]:offsets[first_chunk_segment + 1]])["incidents"]
        started = time.perf_counter()
        start_snapshot.decode_concepts(memoryview(inputs[0])[offsets[0]:offsets[1]])
        parts = start_snapshot.RecordParts(inputs[0], ids, list(itertools.pairwise(offsets[1:first_chunk_segment + 1])),
                                           "bench")
        loaded = list(parts.values())
        del parts  # it holds the input bytes
        kept = None
    else:
        pieces = split_snapshot(start_snapshot.snapshot_path(folder, KEY).read_bytes())
        concepts, parts_bytes = pieces[1], pieces[2]
        inputs = [concepts, *parts_bytes]
        del pieces  # the chunk columns, not used here
        started = time.perf_counter()
        concepts_adapter.validate_json(concepts)
        loaded = [record for part in parts_bytes for record in records.validate_json(part)]
        del concepts, parts_bytes
        kept = None
    seconds = time.perf_counter() - started
    del inputs
    held = rss_mb() - before
    return {"records": len(loaded), "rss_mb": held, "seconds": seconds}


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

    with tempfile.TemporaryDirectory(prefix="bench-records-") as name:
        folder = Path(name)
        count = write_inputs(folder, args.copies)
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                out = subprocess.run([sys.executable, __file__, "--child", mode, "--cache", str(folder)],
                                     check=True, capture_output=True, text=True).stdout
                run = json.loads(out)
                assert run["records"] == count
                results[mode].append(run)

    def median(mode: str, field: str) -> float:
        return statistics.median(run[field] for run in results[mode])

    print(f"{count:,} records (the bundled ones × {args.copies}) and their chunks, parts of "
          f"{start_snapshot.RECORDS_PER_PART:,} records, median of {args.rounds} rounds\n")
    print("| step | RSS added (MB) | KB a record | vs format 1 | time (s) | µs a record |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        base = median("records, one array" if mode.startswith("records") else "whole load, format 1", "rss_mb")
        rss, seconds = median(mode, "rss_mb"), median(mode, "seconds")
        print(f"| {mode} | {rss:,.0f} | {rss * 1024 / count:.1f} | {rss / base:.2f}× | {seconds:.2f} | "
              f"{seconds * 1e6 / count:.0f} |")


if __name__ == "__main__":
    main()
