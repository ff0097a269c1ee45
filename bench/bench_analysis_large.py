"""Analysis calls on a large library: seconds and memory of each, for this tree and others, side by side.

    python bench/bench_analysis_large.py WORK --tree /path/to/other/checkout --tree . --timeout 300

``WORK`` is a directory ``bench_start.py`` wrote (``library/`` and ``cache/``; its start snapshot made by each tree
beforehand, so each opens warm).  Each (tree, call) runs in a fresh interpreter that imports ``incidentlib`` from
that tree, opens the library from its snapshot, then times one call: ``diagnose`` (by symptoms, no text, so no
search runs), ``organizations`` (every organisation's count) or ``signals`` (every library signal explained).
Reported: seconds, the anonymous RSS the call added over the opened library, and the process's peak RSS.  A call
still running after ``--timeout`` seconds is stopped and reported as unfinished.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tree_child import Unfinished, run_in_tree

CALLS = {
    "diagnose": "library.diagnose(symptoms=['collective-timeout', 'xid-errors'])",
    "organizations": "library.organizations()",
    "signals": "library.signals()",
}

_CHILD = r"""
work, call = Path(sys.argv[2]), sys.argv[3]
from incidentlib import Library

library = Library.open(work / "library", cache_dir=work / "cache")
opened = memory()
start = time.perf_counter()
answer = eval(call)
seconds = time.perf_counter() - start
done = memory()
size = len(answer) if isinstance(answer, list) else len(getattr(answer, "causes", getattr(answer, "items", [])))
print(json.dumps({"seconds": seconds, "added_mb": done["RssAnon"] - opened["RssAnon"], "peak_mb": done["VmHWM"],
                  "answer_items": size}))
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
    print("| call | tree | seconds | anonymous RSS added (MB) | peak RSS (MB) | items in the answer |")
    print("|---|---|---|---|---|---|")
    for call in args.call or list(CALLS):
        for tree in args.tree:
            row = run(tree.resolve(), args.work.resolve(), call, args.timeout)
            if row.get("unfinished"):
                print(f"| {call} | {tree} | unfinished after {args.timeout:.0f} s | | | |", flush=True)
                continue
            print(f"| {call} | {tree} | {row['seconds']:.2f} | {row['added_mb']:,} | {row['peak_mb']:,} | "
                  f"{row['answer_items']} |", flush=True)


if __name__ == "__main__":
    main()
