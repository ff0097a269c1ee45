"""The cost of the patches a live write applies, timed alone on a large library: the facet columns
(``Facets.patched``), the graph projection (``projection_patch.patched_projection``) and related's concept document
frequencies (``patched_frequencies``), each for one changed incident, next to what they replace.

    python bench/probe_write_patches.py /work/bs/n100000      # a bench_start.py WORK directory

The changed incident is the first one with a concept of the library's most common one removed, laid over the
records as a write lays it (``OverlaidRecords``); nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from incidentlib import Library  # noqa: E402
from incidentlib.graph import scoring  # noqa: E402
from incidentlib.graph.projection import build_projection  # noqa: E402
from incidentlib.graph.projection_patch import patched_frequencies, patched_projection  # noqa: E402
from incidentlib.overlaid import OverlaidRecords  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a bench_start.py directory with library/ and cache/")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    library = Library.open(args.work / "library", cache_dir=args.work / "cache")
    data = library.data
    started = time.perf_counter()
    facets = library._facets
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    graph = build_projection(data)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    frequencies = scoring.document_frequency(graph)
    count_s = time.perf_counter() - started
    first = data.incidents[next(iter(data.incidents))]
    changed = first.model_copy(update={"components": first.components[1:]})
    after = replace(data, incidents=OverlaidRecords(data.incidents, {first.id: changed}))
    print(f"{len(data.incidents):,} incidents; one changed incident ({first.id}, a component fewer)\n")
    print("| round | facet columns patched (s) | projection patched (s) | frequencies patched (s) |\n|---|---|---|---|")
    for round_number in range(1, args.rounds + 1):
        started = time.perf_counter()
        patched_facets = facets.patched(after.incidents, {first.id})
        facets_s = time.perf_counter() - started
        started = time.perf_counter()
        patched = patched_projection(graph, data, after, {first.id})
        graph_s = time.perf_counter() - started
        started = time.perf_counter()
        patched_frequencies(frequencies, graph, patched, {first.id})
        frequencies_s = time.perf_counter() - started
        print(f"| {round_number} | {facets_s:.3f} | {graph_s:.3f} | {frequencies_s:.3f} |", flush=True)
    assert patched_facets.values["components"][0] == tuple(changed.components)
    print(f"\nwhat they replace: the facet columns read from every record {read_s:.1f} s, the projection built from the "
          f"records {build_s:.1f} s, the frequencies counted {count_s:.2f} s")


if __name__ == "__main__":
    main()
