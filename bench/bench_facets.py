"""What the facet columns of the ``inferred`` filter cost: memory and build time of :class:`incidentlib.facets.Facets`
with and without the columns of inferred links, on copies of an imported library's drafts.

    python bench/bench_facets.py --data /tmp/pglib --records 100000     # an imported, tagged library; prints Markdown

The records of ``--data`` are copied under new ids (shallow copies: the same texts and links) up to ``--records``.
Each round builds the columns both ways in turn: as this version does (``FACET_FIELDS``: the curated fields, then one
column per inferred kind) and with the curated fields only (what the columns held before the filter).  Memory is the
size ``tracemalloc`` counts for the built columns (the records are made before tracing starts); time is the wall
time of another build, untraced.  Medians over ``--rounds``.  The machine is shared: compare the rows with each other.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from pathlib import Path
from unittest import mock

from incidentlib import facets as facets_module
from incidentlib.loader import load_library
from incidentlib.models import CONCEPT_FIELDS, Incident


def copies(source: list[Incident], count: int) -> dict[str, Incident]:
    records: dict[str, Incident] = {}
    for n in range(count):
        record = source[n % len(source)]
        records[f"BF-{n:07d}"] = record.model_copy(update={"id": f"BF-{n:07d}"})
    return records


def measure(records: dict[str, Incident], fields: tuple[str, ...]) -> tuple[float, float]:
    """(MB held by the built columns, seconds to build them) with ``fields`` as the facet fields."""
    with mock.patch.object(facets_module, "FACET_FIELDS", fields):
        gc.collect()
        started = time.perf_counter()
        timed = facets_module.Facets.of(records)  # timed without tracing, which slows every allocation
        seconds = time.perf_counter() - started
        del timed
        gc.collect()
        tracemalloc.start()
        built = facets_module.Facets.of(records)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert set(built.values) == set(fields)
    del built
    return held / 2**20, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a library of imported, tagged drafts")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = list(load_library(args.data).incidents.values())
    records = copies(source, args.records)
    proposed = sum(len(r.proposed()) for r in source) / len(source)
    ways = {"curated and inferred columns (this version)": facets_module.FACET_FIELDS,
            "curated columns only (before)": tuple(CONCEPT_FIELDS)}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, fields in ways.items():
            results[name].append(measure(records, fields))
    print(f"{args.records:,} records copied from {len(source)} of {args.data} "
          f"({proposed:.1f} proposed inferred links a record), median of {args.rounds} rounds\n")
    print("| facet columns | MB | build s |\n|---|---|---|")
    for name, rows in results.items():
        print(f"| {name} | {statistics.median(r[0] for r in rows):.1f} | {statistics.median(r[1] for r in rows):.2f} |")


if __name__ == "__main__":
    main()
