"""Load benchmark of `incidentlib serve`: throughput and latency under a steady load, then overload.

    python bench/bench_load.py                         # 20 users for 60 s, then overload; prints Markdown
    python bench/bench_load.py --users 5 --seconds 10  # a smoke run

It starts its own server on a free loopback port (loopback only: nothing leaves the
machine) with the default guards, waits for it, and runs two phases:

1. **Steady load**: ``--users`` closed-loop users for ``--seconds``.  Each user has its
   own source address (127.0.0.2, 127.0.0.3, …: all of 127.0.0.0/8 is loopback on
   Linux), as separate clients would, so per-client rate limits apply per user.  A
   user sends one request, waits for the answer, sends the next: a mix of search,
   similar, incident detail, listing and diagnose.  Reported: requests/s, latency
   p50/p95/p99, and errors (any status other than 200, or a transport error).
2. **Overload**: ``--overload-users`` users on ONE address, no pause, for
   ``--overload-seconds``: far beyond what the server's bounded worker pool and the
   per-client rate limit allow.  Reported: how many were answered 200, 429 (rate
   limit) and 503 (busy), how fast the refusals came back, and timeouts (must be 0).

Latencies are wall-clock on a shared machine; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
# Generous: a request slower than this is counted as a timeout, which must not happen.
REQUEST_TIMEOUT_SECONDS = 30.0
STARTUP_TIMEOUT_SECONDS = 600.0

QUERIES = [
    "NCCL watchdog timeout", "GPU fell off the bus", "InfiniBand link flapping", "DNS outage configuration change",
    "BGP route withdrawal", "쿠버네티스 컨트롤 플레인 장애", "학습 중 GPU 메모리 오류", "certificate expired",
    "Xid 79", "load balancer capacity", "ECC errors during training", "CDN cache purge outage",
]
ERRORS = [
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)",
    "NVRM: Xid 79, GPU has fallen off the bus",
    "SERVFAIL for every query after a deploy",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def start_server(port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    exe = shutil.which("incidentlib", path=str(Path(sys.executable).parent))
    command = [exe, "serve"] if exe else [sys.executable, "-m", "incidentlib", "serve"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([*command, "--host", "127.0.0.1", "--port", str(port), "--no-mcp", *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while True:
        if process.poll() is not None:
            raise SystemExit("the server exited during start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit("the server did not become healthy")
        time.sleep(0.5)


def request_for(user: int, step: int, ids: list[str]) -> tuple[str, str, dict[str, object]]:
    """The user's next request: mostly search and similar (the expensive routes), some cheap reads."""
    kind = (user + step) % 10
    query = QUERIES[(user * 7 + step) % len(QUERIES)]
    if kind < 5:
        return "GET", "/search", {"params": {"q": query, "k": 10}}
    if kind < 7:
        return "POST", "/similar", {"json": {"text": ERRORS[step % len(ERRORS)], "k": 5}}
    if kind == 7:
        return "GET", f"/incidents/{ids[step % len(ids)]}", {}  # ids the library has (its numbering has gaps)
    if kind == 8:
        return "GET", "/incidents", {"params": {"limit": 20, "offset": step % 100}}
    return "POST", "/diagnose", {"json": {"text": ERRORS[(user + step) % len(ERRORS)]}}


class Tally:
    def __init__(self) -> None:
        self.latencies: dict[int, list[float]] = {}
        self.transport_errors: Counter[str] = Counter()

    def add(self, status: int, seconds: float) -> None:
        self.latencies.setdefault(status, []).append(seconds)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.latencies.values()) + sum(self.transport_errors.values())


async def user_loop(base: str, user: int, address: str, until: float, tally: Tally, ids: list[str]) -> None:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=base, transport=transport, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        step = 0
        while time.monotonic() < until:
            method, path, kwargs = request_for(user, step, ids)
            step += 1
            started = time.perf_counter()
            try:
                response = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
            except httpx.TimeoutException:
                tally.transport_errors["timeout"] += 1
                continue
            except httpx.TransportError as exc:
                tally.transport_errors[type(exc).__name__] += 1
                continue
            tally.add(response.status_code, time.perf_counter() - started)


async def run_phase(base: str, users: int, seconds: float, shared_address: bool, ids: list[str]) -> tuple[Tally, float]:
    tally = Tally()
    started = time.monotonic()
    until = started + seconds
    await asyncio.gather(*(
        user_loop(base, user, "127.0.0.2" if shared_address else f"127.0.{2 + user // 250}.{2 + user % 250}", until, tally, ids)
        for user in range(users)
    ))
    return tally, time.monotonic() - started


def ms(value: float) -> str:
    return f"{value * 1000:.0f}"


def report(steady: Tally, steady_seconds: float, over: Tally, over_seconds: float, args: argparse.Namespace) -> str:
    ok = steady.latencies.get(200, [])
    errors = steady.total - len(ok)
    lines = [
        (f"Produced by `python bench/bench_load.py --users {args.users} --seconds {args.seconds:g} "
         f"--overload-users {args.overload_users} --overload-seconds {args.overload_seconds:g}` "
         f"on {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} CPUs, against a local "
         "`incidentlib serve` with default guards (use-m3 embedder)."),
        "",
        f"### Steady load: {args.users} users, {args.seconds:g} s, one address per user",
        "",
        "| requests | throughput (req/s) | p50 (ms) | p95 (ms) | p99 (ms) | errors |",
        "|---|---|---|---|---|---|",
        (f"| {steady.total} | {len(ok) / steady_seconds:.1f} | {ms(percentile(ok, 50))} | {ms(percentile(ok, 95))} | "
         f"{ms(percentile(ok, 99))} | {errors} |"),
        "",
        f"### Overload: {args.overload_users} users on one address, no pause, {args.overload_seconds:g} s",
        "",
        "| status | responses | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|",
    ]
    for status in sorted(over.latencies):
        values = over.latencies[status]
        lines.append(f"| {status} | {len(values)} | {ms(percentile(values, 50))} | {ms(percentile(values, 99))} |")
    timeouts = over.transport_errors.get("timeout", 0)
    others = sum(over.transport_errors.values()) - timeouts
    lines += [f"| timeout | {timeouts} | – | – |", f"| other transport error | {others} | – | – |", "",
              f"{over.total} requests in {over_seconds:.1f} s."]
    if steady.transport_errors or errors:
        lines.append(f"\nSteady-load errors by status: { {s: len(v) for s, v in steady.latencies.items() if s != 200} }, "
                     f"transport: {dict(steady.transport_errors)}")
    return "\n".join(lines)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and all its living descendants (and their reaped children), from /proc."""
    stats: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, fields in stats.items():
            if int(fields[1]) == parent and child not in family:
                family.add(child)
                frontier.append(child)
    ticks = sum(sum(int(v) for v in stats[member][11:15]) for member in family if member in stats)
    return ticks / os.sysconf("SC_CLK_TCK")


def scaling(base: str, pid: int, counts: list[int], seconds: float, ids: list[str]) -> str:
    """Throughput, latency and server CPU per request at each number of users, one after another on one server."""
    lines = [f"### Throughput against users ({seconds:g} s each, one address per user, {os.cpu_count()} CPUs)", "",
             "| users | throughput (req/s) | p50 (ms) | p99 (ms) | 429 (rate limit) | other errors | server CPU per request (ms) "
             "| server CPU use (cores) |",
             "|---|---|---|---|---|---|---|---|"]
    for users in counts:
        before = cpu_seconds(pid)
        tally, elapsed = asyncio.run(run_phase(base, users, seconds, shared_address=False, ids=ids))
        used = cpu_seconds(pid) - before
        ok = tally.latencies.get(200, [])
        limited = len(tally.latencies.get(429, []))
        lines.append(f"| {users} | {len(ok) / elapsed:.1f} | {ms(percentile(ok, 50))} | {ms(percentile(ok, 99))} | "
                     f"{limited} | {tally.total - len(ok) - limited} | {ms(used / max(1, tally.total))} | {used / elapsed:.2f} |")
        time.sleep(2)  # let the rate-limit buckets refill
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--overload-users", type=int, default=200)
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--data", help="library directory (default: the bundled one)")
    parser.add_argument("--cache", help="index cache directory (default: the usual one)")
    parser.add_argument("--processes", type=int, default=1, help="serve --processes N (server processes on one port)")
    parser.add_argument("--scaling", help="comma-separated user counts (e.g. 1,2,4,8,20): instead of the two phases, "
                        "a steady run of --seconds at each, with the server's CPU time per request")
    args = parser.parse_args()
    if not (1 <= args.users <= 500 and 1 <= args.overload_users <= 1000 and args.seconds <= 600 and args.overload_seconds <= 600):
        raise SystemExit("keep the run bounded: at most 500 users / 1000 overload users and 600 s per phase")
    extra = [*(["--data", args.data] if args.data else []), *(["--cache", args.cache] if args.cache else []),
             "--processes", str(args.processes)]
    port = free_port()
    server = start_server(port, extra)
    base = f"http://127.0.0.1:{port}"
    try:
        ids = [item["id"] for item in httpx.get(f"{base}/incidents", params={"limit": 150}, timeout=60).json()["items"]]
        asyncio.run(run_phase(base, 2, 3, shared_address=False, ids=ids))  # warm-up: first queries build caches
        time.sleep(1)
        if args.scaling:
            counts = [int(part) for part in args.scaling.split(",")]
            if not all(1 <= c <= 500 for c in counts):
                raise SystemExit("--scaling: user counts between 1 and 500")
            print(f"Produced by `python bench/bench_load.py --scaling {args.scaling} --seconds {args.seconds:g} "
                  f"--processes {args.processes}` on "
                  f"{platform.machine()}, CPython {platform.python_version()}, against a local `incidentlib serve` "
                  "with default guards (use-m3 embedder).\n")
            print(scaling(base, server.pid, counts, args.seconds, ids))
            return
        steady, steady_seconds = asyncio.run(run_phase(base, args.users, args.seconds, shared_address=False, ids=ids))
        time.sleep(2)  # let the rate-limit buckets refill
        over, over_seconds = asyncio.run(run_phase(base, args.overload_users, args.overload_seconds, shared_address=True, ids=ids))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    print(report(steady, steady_seconds, over, over_seconds, args))


if __name__ == "__main__":
    main()
