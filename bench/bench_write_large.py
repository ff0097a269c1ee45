"""What a write costs a process serving a large library: the draft stored, then the index brought along, per tree.

    python bench/bench_write_large.py WORK --writes 2 --rounds 1 --tree /path/to/other/checkout --tree .

``WORK`` is a directory ``bench_start.py`` wrote (``library/`` and ``cache/``, the index built).  For each (round,
tree) a scratch copy of both is made with hard links (``cp -al``: a write adds the overlay store to the copy; cache
files are replaced by rename, never written in place, so the originals stay as they were), and a fresh interpreter
that imports ``incidentlib`` from that tree opens the copy, answers one search, then files ``--writes`` drafts
through ``Library.create_draft`` and, after each, times ``refresh()`` + ``prepare_search()``, then
``prepare_facets()``: what the follower of ``serve`` does before the next request finds the draft (the facet columns
are read once after the first search, as ``serve`` reads them after its first answer).  With ``--graph`` the graph
projection is built once opened too, and ``prepare_graph()`` (what ``serve`` runs in the background) is timed after
each write, with the draft checked to be in the projection.  Each draft is checked to be found by a lexical search for
its unique word.  Reported per write: seconds to store it, seconds to bring the index along, seconds to bring the facet
columns along (what ``prepare_facets`` still had to do after the refresh), the process's RSS and
anonymous RSS after it, and its peak RSS so far.  The trees take turns within a round.  The first start of a tree
on a library rebuilds its start snapshot (its key covers the code): run a round first and leave it out.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from tree_child import run_in_tree

_CHILD = r"""
copy, writes, graph, compact = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "graph", sys.argv[5] == "compact"
from incidentlib import Library

start = time.perf_counter()
library = Library.open(copy / "library", cache_dir=copy / "cache")
library.search("nccl watchdog timeout", k=3)
print(json.dumps({"step": "opened and searched", "seconds": time.perf_counter() - start, **memory()}), flush=True)
start = time.perf_counter()
library.prepare_facets()
print(json.dumps({"step": "facet columns read", "seconds": time.perf_counter() - start, **memory()}), flush=True)
if graph:
    start = time.perf_counter()
    library.prepare_graph()
    print(json.dumps({"step": "graph projection built", "seconds": time.perf_counter() - start, **memory()}), flush=True)
for n in range(writes):
    word = f"zebraquux{n}"
    doc = {"title": {"en": f"NCCL watchdog timeout {word} on the training cluster"}, "org": "imbue",
           "summary": {"en": f"A draft filed while the incident runs ({word})."},
           "body": {"en": "The watchdog fired on every rank after an all-reduce stalled."},
           "sources": [{"url": "https://example.com/postmortem", "title": "Postmortem"}]}
    start = time.perf_counter()
    stored = library.create_draft(doc)
    stored_at = time.perf_counter()
    library.refresh()
    library.prepare_search()
    ready_at = time.perf_counter()
    library.prepare_facets()
    facets_at = time.perf_counter()
    if graph:
        library.prepare_graph()
        assert library._knowledge.nx.has_node(f"incident:{stored.id}")
    graph_at = time.perf_counter()
    found = [hit.id for hit in library.search(word, k=3, mode="lexical").results]
    assert found[:1] == [stored.id], (word, stored.id, found)
    print(json.dumps({"step": f"write {n + 1}", "store_s": stored_at - start, "index_s": ready_at - stored_at,
                      "facets_s": facets_at - ready_at, **({"graph_s": graph_at - facets_at} if graph else {}), **memory()}), flush=True)
if compact:
    start = time.perf_counter()
    report = library.compact()
    seconds = time.perf_counter() - start
    assert report.dense == "compacted", report
    print(json.dumps({"step": f"compacted ({report.dense_rows:,} rows, {report.dead_rows_dropped} dead)",
                      "seconds": seconds, "index_s": seconds, **memory()}), flush=True)
"""


def run(tree: Path, work: Path, writes: int, graph: bool, compact: bool = False) -> list[dict[str, object]]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-write-", dir=work.parent))
    try:
        for part in ("library", "cache"):
            subprocess.run(["cp", "-al", str(work / part), str(scratch / part)], check=True)
        return run_in_tree(tree, _CHILD, str(scratch), str(writes), "graph" if graph else "no-graph",
                           "compact" if compact else "no-compact")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a bench_start.py directory with library/ and cache/ (index built)")
    parser.add_argument("--tree", type=Path, action="append", required=True, help="a checkout to measure (repeat)")
    parser.add_argument("--writes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--graph", action="store_true",
                        help="also build the graph projection once opened, and time bringing it along after each write")
    parser.add_argument("--compact", action="store_true",
                        help="after the writes, time Library.compact() (what serve runs once writes stop)")
    args = parser.parse_args()
    print("| round | tree | step | store (s) | index brought along (s) | facet columns brought along (s) | "
          "graph projection brought along (s) | RSS (MB) | anonymous (MB) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for round_number in range(args.rounds):
        for tree in args.tree:
            for row in run(tree.resolve(), args.work.resolve(), args.writes, args.graph, args.compact):
                seconds = row.get("seconds")
                store = f"{row['store_s']:.1f}" if "store_s" in row else (f"{seconds:.1f}" if seconds else "")
                index = f"{row['index_s']:.1f}" if "index_s" in row else ""
                facets = f"{row['facets_s']:.2f}" if "facets_s" in row else ""
                projection = f"{row['graph_s']:.2f}" if "graph_s" in row else ""
                print(f"| {round_number + 1} | {tree} | {row['step']} | {store} | {index} | {facets} | {projection} | {row['VmRSS']:,} | "
                      f"{row['RssAnon']:,} | {row['VmHWM']:,} |", flush=True)


if __name__ == "__main__":
    main()
