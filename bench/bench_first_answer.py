"""Launch → first search answer of a real ``incidentlib serve``, for one or more source trees, alternating.

    python bench/bench_first_answer.py LIBRARY --run /work/base:/tmp/cache-base --run .:/tmp/cache --rounds 2

Each ``--run TREE:CACHE`` starts ``python -m incidentlib serve --data LIBRARY --cache CACHE --no-mcp`` with
``PYTHONPATH=TREE`` and TREE as its working folder (``-m`` puts the working folder first on the path, so
both are needed for a checkout of an earlier commit to run its own code), polls
``GET /search?q=NCCL watchdog timeout&k=10`` every ``POLL_SECONDS`` until it answers 200, reads the server's
``/proc/PID/status`` (RSS, anonymous RSS, peak), and stops it: unlike ``bench_start.py`` it does not wait for
the graph, which takes minutes at 100k incidents.  Runs alternate round by round, so a busy spell of the
machine falls on both.  Give each tree its own cache whose start snapshot is current for that tree's code
(the snapshot key covers the code: a tree that finds none loads the YAML), e.g. a hard-linked copy
(``cp -al``) made after a start of that tree.  Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: Seconds between two polls: short against a start of seconds, long enough not to load the server.
POLL_SECONDS = 0.05
#: A start slower than this is reported as failed rather than waited for.
START_TIMEOUT_SECONDS = 1800.0
QUERY = "NCCL%20watchdog%20timeout"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _status_mb(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            found[name] = int(value.split()[0]) // 1024
    return found


def first_answer(tree: Path, library: Path, cache: Path) -> dict[str, float]:
    """Seconds from launch to the first search answer, and the server's memory then (MB)."""
    port = _free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "incidentlib", "serve", "--data", str(library), "--cache", str(cache), "--port", str(port),
         "--no-mcp"], env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"serve from {tree} exited with {process.returncode}")
            if time.perf_counter() - started > START_TIMEOUT_SECONDS:
                raise RuntimeError(f"serve from {tree} did not answer in {START_TIMEOUT_SECONDS:.0f} s")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/search?q={QUERY}&k=10", timeout=60) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass  # not listening yet
            time.sleep(POLL_SECONDS)
        seconds = time.perf_counter() - started
        memory = _status_mb(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    return {"seconds": seconds, "rss_mb": memory["VmRSS"], "anon_mb": memory["RssAnon"], "peak_mb": memory["VmHWM"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", type=Path)
    parser.add_argument("--run", action="append", required=True, metavar="TREE:CACHE",
                        help="a source tree and the cache its server uses (repeatable)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = [(Path(tree).resolve(), Path(cache).resolve()) for tree, _, cache in (item.partition(":") for item in args.run)]
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree, _ in runs}
    for _ in range(args.rounds):
        for tree, cache in runs:
            result = first_answer(tree, args.library.resolve(), cache)
            results[tree].append(result)
            print(f"{tree}: first answer {result['seconds']:.1f} s, RSS {result['rss_mb']} MB "
                  f"(anonymous {result['anon_mb']} MB), peak {result['peak_mb']} MB", flush=True)
    print("\n| tree | launch → first answer | RSS then | peak RSS |\n|---|---|---|---|")
    for tree, measured in results.items():
        seconds = ", ".join(f"{r['seconds']:.1f}" for r in measured)
        rss = ", ".join(f"{r['rss_mb']:,}" for r in measured)
        peak = ", ".join(f"{r['peak_mb']:,}" for r in measured)
        print(f"| {tree} | {seconds} s | {rss} MB | {peak} MB |")


if __name__ == "__main__":
    main()
