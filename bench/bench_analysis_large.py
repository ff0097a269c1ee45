"""Analysis calls on a large library: seconds and memory of each, for this tree and others, side by side.

    python bench/bench_analysis_large.py WORK --tree /path/to/other/checkout --tree . --timeout 300

``WORK`` is a directory ``bench_start.py`` wrote (``library/`` and ``cache/``; its start snapshot made by each tree
beforehand, so each opens warm).  Each (tree, call) runs in a fresh interpreter that imports ``incidentlib`` from
that tree, opens the library from its snapshot, then times one call: ``diagnose`` (by symptoms, no text, so no
search runs), ``organizations`` (every organisation's count), ``signals`` (every library signal explained) ``clusters`` (the graph clusters, every incident a member of one) or ``map`` (the map's points: the graph clusters,
then t-SNE of at most ``analysis.MAP_POINTS`` incidents).
Reported: the seconds to open and the anonymous RSS then; the seconds of the call, made twice (the first builds
what it reads, the second is what a serving process pays per request), the anonymous RSS the two calls added, and
the process's peak RSS.  A call still running after ``--timeout`` seconds is stopped and reported as unfinished.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tree_child import Unfinished, run_in_tree

CALLS = {
    "diagnose": "library.diagnose(symptoms=['collective-timeout', 'xid-errors'])",
    "organizations": "library.organizations()",
    "signals": "library.signals()",
    "clusters": "library.clusters()",
    "map": "library.map_points()",
}

_CHILD = r"""
work, call = Path(sys.argv[2]), sys.argv[3]
from incidentlib import Library

start = time.perf_counter()
library = Library.open(work / "library", cache_dir=work / "cache")
open_s = time.perf_counter() - start
opened = memory()
start = time.perf_counter()
answer = eval(call)
first_s = time.perf_counter() - start
start = time.perf_counter()
again = eval(call)
again_s = time.perf_counter() - start
done = memory()
size = len(answer) if isinstance(answer, list) else len(getattr(answer, "causes", None) or getattr(answer, "items", None)
                                                         or getattr(answer, "clusters", []))
print(json.dumps({"open_s": open_s, "opened_anon_mb": opened["RssAnon"], "first_s": first_s, "again_s": again_s,
                  "added_mb": done["RssAnon"] - opened["RssAnon"], "peak_mb": done["VmHWM"], "answer_items": size,
                  "same_answer": again == answer}))
"""


def run(tree: Path, work: Path, call: str, timeout: float) -> dict[str, object]:
    try:
        return run_in_tree(tree, _CHILD, str(work), CALLS[call], timeout=timeout)[-1]
    except Unfinished:
        return {"unfinished": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--call", choices=sorted(CALLS), action="append")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    print("| call | tree | open (s) | anonymous RSS once open (MB) | first call (s) | second call (s) | "
          "anonymous RSS the calls added (MB) | peak RSS (MB) | items in the answer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for call in args.call or list(CALLS):
        for tree in args.tree:
            row = run(tree.resolve(), args.work.resolve(), call, args.timeout)
            if row.get("unfinished"):
                print(f"| {call} | {tree} | unfinished after {args.timeout:.0f} s | | | | | | |", flush=True)
                continue
            assert row["same_answer"], (tree, call, "the second call answered differently")
            print(f"| {call} | {tree} | {row['open_s']:.1f} | {row['opened_anon_mb']:,} | {row['first_s']:.2f} | "
                  f"{row['again_s']:.2f} | {row['added_mb']:,} | {row['peak_mb']:,} | {row['answer_items']} |", flush=True)


if __name__ == "__main__":
    main()
