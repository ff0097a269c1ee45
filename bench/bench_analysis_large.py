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
import json
import subprocess
import sys
from pathlib import Path

CALLS = {
    "diagnose": "library.diagnose(symptoms=['collective-timeout', 'xid-errors'])",
    "organizations": "library.organizations()",
    "signals": "library.signals()",
}

_CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
work, call = Path(sys.argv[2]), sys.argv[3]

def memory():
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name = line.split(":")[0]
        if name in ("RssAnon", "VmHWM"):
            values[name] = int(line.split()[1]) // 1024
    return values

import incidentlib
assert Path(incidentlib.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), incidentlib.__file__
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
        answer = subprocess.run([sys.executable, "-c", _CHILD, str(tree), str(work), CALLS[call]], capture_output=True,
                                text=True, check=False, cwd="/", timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"unfinished": True}
    if answer.returncode != 0:
        raise SystemExit(f"{tree} {call}: failed:\n{answer.stderr[-3000:]}")
    return json.loads(answer.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


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
