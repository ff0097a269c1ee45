"""Loading a saved BM25 index: time and memory, one source tree after another, each in a fresh process.

    python bench/bench_lexical_load.py CACHE/lexical/<key> --tree before=/path/to/old/tree --tree after=. --rounds 3

Each round runs every tree once, in order, as ``python -c`` in the tree's folder with ``PYTHONPATH`` set to it (``-c`` puts the working folder first on the path): it times
``load_postings`` (checksums, checks and arrays, what a server start does for BM25) and one lexical query
(``scores`` for "NCCL watchdog timeout"), then reads the process's ``/proc/self/status``: VmRSS and its anonymous
part (RssAnon, the heap; the rest is mapped file pages that the page cache holds anyway). The first round warms
the page cache for both trees alike; every round is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
from pathlib import Path
from incidentlib.search.lexical import LexicalIndex
from incidentlib.search.lexical_store import load_postings

folder = Path(sys.argv[1])
size = json.loads((folder / "meta.json").read_text())["chunks"]
start = time.perf_counter()
postings = load_postings(folder, size)
loaded = time.perf_counter()
scores = LexicalIndex(postings=postings).scores("NCCL watchdog timeout")
queried = time.perf_counter()
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
kb = lambda key: int(status[key].split()[0]) // 1024
print(json.dumps({"load_s": loaded - start, "query_s": queried - loaded, "matched": int((scores > 0).sum()),
                  "rss_mb": kb("VmRSS"), "anon_mb": kb("RssAnon"), "peak_mb": kb("VmHWM")}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a saved lexical index: <cache>/lexical/<key>")
    parser.add_argument("--tree", action="append", required=True, help="name=path of a source tree (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = [spec.split("=", 1) for spec in args.tree]
    print("| round | tree | load (s) | first query (s) | chunks matched | RSS (MB) | of it heap (MB) | peak (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for round_number in range(1, args.rounds + 1):
        for name, path in trees:
            env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.folder.resolve())], env=env, check=True, cwd=path,
                                 capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            print(f"| {round_number} | {name} | {row['load_s']:.2f} | {row['query_s']:.3f} | {row['matched']:,} | "
                  f"{row['rss_mb']:,} | {row['anon_mb']:,} | {row['peak_mb']:,} |", flush=True)


if __name__ == "__main__":
    main()
