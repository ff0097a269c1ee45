"""Wall time of a warm ``incidentlib search`` from the shell, for one or more source trees side by side.

    python bench/bench_cli.py --runs 5 --tree before=/path/to/old/checkout --tree after=.

Each tree runs ``python -m incidentlib search QUERY -k 3`` with ``PYTHONPATH`` set to it, once to
warm its caches (not timed), then ``--runs`` times, interleaved between trees so that a busy
machine slows all of them alike.  Prints a Markdown table of median, min and max seconds of wall
time and of CPU time (user + system of the child process, which other jobs on the machine disturb
less than wall time), and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_QUERY = "NCCL watchdog timeout"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(tree: Path, query: str, extra: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one search in a new process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu = _children_cpu()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "incidentlib", "search", query, "-k", "3", *extra], env=env, cwd=tree,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, _children_cpu() - cpu


def _load() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


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
    load_before = _load()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            samples[name].append(run(tree, args.query, extra))
    print(f"`incidentlib search {args.query!r} -k 3 --mode {args.mode}`, {args.runs} warm runs each, interleaved; "
          f"load average (1/5/15 min) {load_before} before, {_load()} after:\n")
    print("| tree | wall median (s) | wall min (s) | wall max (s) | CPU median (s) | CPU min (s) | CPU max (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, values in samples.items():
        wall = [w for w, _ in values]
        cpu = [c for _, c in values]
        print(f"| {name} | {statistics.median(wall):.2f} | {min(wall):.2f} | {max(wall):.2f} "
              f"| {statistics.median(cpu):.2f} | {min(cpu):.2f} | {max(cpu):.2f} |")


if __name__ == "__main__":
    main()
