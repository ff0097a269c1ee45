"""The NetworkX projection read from a graph store: time and memory, for this tree and for other trees, side by side.

    python bench/bench_projection.py WORK --rounds 2 --tree /path/to/other/checkout --tree .

``WORK`` is a directory ``bench_start.py`` wrote (``library/``, ``cache/``, and ``graph/``, an Oxigraph store of the
library; ``bench_start.py --graph oxigraph`` loads it).  Each (round, tree) runs in a fresh interpreter that imports
``incidentlib`` from that tree, opens the library and its store, then times ``projection_from_store`` (the five
SELECTs and the graph) as the server's background build runs it.  Reported per run: seconds, the anonymous RSS the
projection added over the opened library and what is left of it once the graph is dropped again (the allocator's
arenas the build scattered), the graph's own share (the difference), and the process's peak RSS.  The trees take
turns within a round, so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tree_child import run_in_tree

_CHILD = r"""
import ctypes, gc
work = Path(sys.argv[2])

def settle():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the allocator can give back is not counted as held

from incidentlib import Library
from incidentlib.graph import projection

assert Path(projection.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), projection.__file__
library = Library.open(work / "library", cache_dir=work / "cache", graph_store=f"oxigraph:{work / 'graph'}")
library.open_graph_store()
settle()
opened = memory()
start = time.perf_counter()
graph = projection.projection_from_store(library._graph_store, library.data)
seconds = time.perf_counter() - start
edges = graph.number_of_edges()
settle()
built = memory()
del graph
settle()
dropped = memory()
print(json.dumps({"seconds": seconds, "edges": edges, "added_mb": built["RssAnon"] - opened["RssAnon"],
                  "left_mb": dropped["RssAnon"] - opened["RssAnon"], "peak_mb": built["VmHWM"]}))
"""


def run(tree: Path, work: Path) -> dict[str, float]:
    return run_in_tree(tree, _CHILD, str(work))[-1]  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a bench_start.py directory with library/, cache/ and graph/")
    parser.add_argument("--tree", type=Path, action="append", required=True,
                        help="a checkout whose incidentlib is measured (repeat for a side-by-side run)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in args.tree}
    for round_number in range(args.rounds):
        for tree in args.tree:
            result = run(tree.resolve(), args.work.resolve())
            results[tree].append(result)
            print(f"round {round_number + 1} {tree}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print("| tree | edges | seconds (median) | anon RSS added (MB) | left once dropped (MB) | the graph (MB) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    for tree, rows in results.items():
        def median(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(row[key] for row in rows)

        print(f"| {tree} | {rows[0]['edges']:,.0f} | {median('seconds'):.1f} | {median('added_mb'):,.0f} | "
              f"{median('left_mb'):,.0f} | {median('added_mb') - median('left_mb'):,.0f} | {median('peak_mb'):,.0f} |")


if __name__ == "__main__":
    main()
