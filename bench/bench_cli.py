"""Wall time of a warm ``incidentlib search`` from the shell, for one or more source trees side by side.

    python bench/bench_cli.py --runs 5 --tree before=/path/to/old/checkout --tree after=.

Each tree runs ``python -m incidentlib search QUERY -k 3`` with ``PYTHONPATH`` set to it, once to
warm its caches (not timed), then ``--runs`` times, interleaved between trees so that a busy
machine slows all of them alike.  Prints a Markdown table of median, min and max seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_QUERY = "NCCL watchdog timeout"


def run(tree: Path, query: str, extra: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "incidentlib", "search", query, "-k", "3", *extra], env=env, cwd=tree,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path of a source tree (repeatable)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--query", default=DEFAULT_QUERY)
    parser.add_argument("--mode", default="hybrid")
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (item.split("=", 1) for item in args.tree)}
    extra = ["--mode", args.mode]
    for tree in trees.values():
        run(tree, args.query, extra)  # warm: build or load the index caches
    samples: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            samples[name].append(run(tree, args.query, extra))
    print(f"`incidentlib search {args.query!r} -k 3 --mode {args.mode}`, {args.runs} warm runs each, interleaved:\n")
    print("| tree | median (s) | min (s) | max (s) |\n|---|---|---|---|")
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()
