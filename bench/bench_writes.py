"""Write benchmarks: throughput of the write API and write-to-searchable latency across processes.

    python bench/bench_writes.py                   # the bundled library (copied), 2 serve processes
    python bench/bench_writes.py --small --writes 100
    python bench/bench_writes.py --copies 5 --mode hybrid --follower on   # a 5x larger library, hybrid search

What is measured, in one run on one machine, against two real `incidentlib serve` processes
sharing one copied library directory:

1. Write throughput: ``--writes`` POST /incidents from ``--clients`` concurrent clients, spread
   over both processes; writes/s and per-write latency p50/p99 (each write is one fsync'd commit).
2. Write-to-searchable latency: a draft with a unique word is written to process A, then
   ``/search?mode=MODE`` (``--mode``: lexical, or hybrid, which also needs the dense index to
   follow) is polled on process B (and, separately, on A) until the draft is among the first
   ``FOUND_WITHIN`` (3) results; from sending the write to the first finding response. p50/p99 over ``--probes``.

``--copies N`` makes the library N times larger: each copy repeats every bundled incident under a
new id (``SY-<copy><number>``) with its curated links dropped.

Latencies are wall-clock on a shared machine: compare within a table, not across runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from incidentlib import Library  # noqa: E402
from incidentlib.paths import resolve_data_dir  # noqa: E402

SMALL_IDS = ["IL-0001", "IL-0002", "IL-0025", "IL-0070"]
#: A probe's draft counts as found when it is among this many results: its word is unique, so lexical search
#: ranks it first, but hybrid fusion may put a closer dense neighbour of the made-up word above it.
FOUND_WITHIN = 3
#: Pause between polls of /search: short against the latency measured, long enough not to starve the server.
POLL_S = 0.01


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve(root: Path, cache: Path, follow: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "incidentlib", "serve", "--port", str(port), "--data", str(root),
                                # the probes poll faster than the per-address rate limit allows: it is not what is measured
                                "--cache", str(cache), "--no-mcp", "--rate-limit", "0", *([] if follow else ["--no-follow"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    base = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise SystemExit("serve exited")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.5)


def draft(word: str) -> dict[str, object]:
    return {"org": "meta", "title": {"en": f"Benchmark draft {word}"}, "summary": {"en": "Synthetic benchmark record."},
            "body": {"en": f"{word} marks this record."}, "sources": [{"url": "https://example.com/bench", "title": "bench"}]}


def grow(root: Path, copies: int) -> None:
    """Add ``copies - 1`` copies of every incident of ``root`` under new ids (curated links dropped)."""
    import yaml

    originals = sorted((root / "incidents").glob("*.yaml"))
    for copy in range(1, copies):
        for number, path in enumerate(originals):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            doc["id"] = f"SY-{copy:02d}{number:04d}"
            doc.pop("related", None)
            (root / "incidents" / f"{doc['id']}.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(args: argparse.Namespace, follow: bool) -> dict[str, float]:
    """One run on a fresh copy of the library: two serve processes, with or without the follower thread."""
    work = Path(tempfile.mkdtemp(prefix="bench-writes-"))
    root = work / "lib"
    source = resolve_data_dir()
    if args.small:
        sys.path.insert(0, str(REPO / "tests"))
        from conftest import small_library

        small_library(root, source, SMALL_IDS)
    else:
        shutil.copytree(source, root, ignore=shutil.ignore_patterns(".incidentlib.db*"))
    grow(root, args.copies)
    token = Library.open(root).create_token("bench", "editor").token
    headers = {"Authorization": f"Bearer {token}"}
    tag = "f" if follow else "n"  # distinct texts per run: the shared cache holds no index of this run's writes
    a, base_a = serve(root, args.cache, follow)
    b, base_b = serve(root, args.cache, follow)
    try:
        def write(n: int) -> float:
            with httpx.Client(headers=headers, timeout=120) as client:
                started = time.perf_counter()
                response = client.post(f"{(base_a, base_b)[n % 2]}/incidents", json=draft(f"load{n:05d}{tag}"))
                response.raise_for_status()
                return time.perf_counter() - started

        for base in (base_a, base_b):
            httpx.get(f"{base}/search", params={"q": "warm", "mode": args.mode}, timeout=3600)
        started = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            latencies = list(pool.map(write, range(args.writes)))
        elapsed = time.perf_counter() - started

        def visible(reader: str, n: int) -> float:
            word = f"probe{n:04d}x{int(time.time() * 1000) % 100000}"
            with httpx.Client(headers=headers, timeout=120) as client:
                started = time.perf_counter()
                new_id = client.post(f"{base_a}/incidents", json=draft(word)).raise_for_status().json()["id"]
                while True:
                    response = client.get(f"{reader}/search", params={"q": word, "mode": args.mode, "k": FOUND_WITHIN})
                    if response.status_code in (429, 503):  # the service's guards: wait as told, then poll again
                        time.sleep(float(response.headers.get("Retry-After", "0.1")))
                        continue
                    results = response.raise_for_status().json()["results"]
                    if new_id in {result["id"] for result in results}:
                        return time.perf_counter() - started
                    time.sleep(POLL_S)

        time.sleep(1.0)  # let both processes catch up with the write burst before probing
        other = [visible(base_b, n) for n in range(args.probes)]
        same = [visible(base_a, args.probes + n) for n in range(args.probes)]
        incidents = httpx.get(f"{base_b}/health", timeout=60).json()["incidents"]
    finally:
        for process in (a, b):
            process.terminate()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)
    ms = 1000.0
    return {"throughput": args.writes / elapsed, "write_p50": pct(latencies, 0.5) * ms, "write_p99": pct(latencies, 0.99) * ms,
            "other_p50": pct(other, 0.5) * ms, "other_p99": pct(other, 0.99) * ms, "same_p50": pct(same, 0.5) * ms,
            "same_p99": pct(same, 0.99) * ms, "other_mean": statistics.mean(other) * ms, "incidents": incidents}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help=f"Only {', '.join(SMALL_IDS)} instead of the whole library.")
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--probes", type=int, default=30)
    parser.add_argument("--copies", type=int, default=1, help="Make the library this many times larger (synthetic copies).")
    parser.add_argument("--mode", choices=["lexical", "hybrid"], default="lexical",
                        help="Search mode the probes poll (hybrid: the dense index must follow too).")
    parser.add_argument("--follower", choices=["on", "off", "both"], default="both",
                        help="Serve with the follower thread, without it (--no-follow), or both side by side.")
    parser.add_argument("--cache", type=Path, help="Index cache to use and keep (default: a temporary one; the first "
                        "start embeds the whole library, later runs with the same --cache start warm).")
    args = parser.parse_args()
    settings = {"on": [True], "off": [False], "both": [True, False]}[args.follower]
    with tempfile.TemporaryDirectory(prefix="bench-writes-cache-") as cache:
        args.cache = args.cache or Path(cache)  # one index cache: the second run starts as warm as the first
        runs = {follow: measure(args, follow) for follow in settings}

    def row(label: str, cell: str) -> None:
        say(f"| {label} | " + " | ".join(cell.format(**runs[follow]) for follow in settings) + " |")

    say(f"Produced by `python bench/bench_writes.py{' --small' if args.small else ''} --copies {args.copies} "
        f"--mode {args.mode} --writes {args.writes} "
        f"--clients {args.clients} --probes {args.probes} --follower {args.follower}` on {platform.machine()}, "
        f"CPython {platform.python_version()}; 2 serve processes per run, each run on a fresh copy.\n")
    say("| measure | " + " | ".join("follower on" if f else "follower off (--no-follow)" for f in settings) + " |")
    say("|---|" + "---|" * len(settings))
    row(f"write throughput ({args.writes} writes, {args.clients} clients)", "{throughput:.1f} writes/s")
    row("write latency p50 / p99", "{write_p50:.0f} / {write_p99:.0f} ms")
    row("write-to-searchable, other process, p50 / p99", "{other_p50:.0f} / {other_p99:.0f} ms")
    row("write-to-searchable, same process, p50 / p99", "{same_p50:.0f} / {same_p99:.0f} ms")
    row("write-to-searchable, other process, mean", "{other_mean:.0f} ms")
    row("incidents at the end", "{incidents:.0f}")


if __name__ == "__main__":
    main()
